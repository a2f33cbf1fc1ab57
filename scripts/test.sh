#!/usr/bin/env bash
# The project's tests, as CI runs them: formatting, vet, a cgo-free build, the
# unit tests (GPU tests skip where no GPU is present), and short fuzz runs of
# every parser of outside input.
#
#   ./scripts/test.sh               # everything (a few minutes on 2 cores)
#   FUZZSCALE=10 ./scripts/test.sh  # ten times the fuzz inputs
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...
echo "== CGO_ENABLED=0 go build"
CGO_ENABLED=0 go build ./...
echo "== go test"
go test -count=1 ./...
echo "== fuzz"
# Each fuzz target of a parser of outside input, as package:target:inputs.
# Runs are bounded by input counts, not by time: a time-bounded Go fuzz run
# can fail with "context deadline exceeded" when its deadline falls while a
# worker is busy, which made CI flaky on a loaded machine. FUZZSCALE
# multiplies every count (FUZZSCALE=10 for a longer session).
scale=${FUZZSCALE:-1}
for t in \
  ./checkpoint:FuzzParseHeader:300000 \
  ./checkpoint:FuzzParseIndex:300000 \
  ./checkpoint:FuzzParseConfig:200000 \
  ./checkpoint:FuzzParseQuantizationConfig:200000 \
  ./calibrate/stats:FuzzParseName:300000 \
  ./calibrate/stats:FuzzParseMeta:300000 \
  ./calibrate/stats:FuzzIndexHeader:200000 \
  ./calibrate:FuzzParseJSONL:100000 \
  ./calibrate:FuzzParseText:100000 \
  ./tokenizer:FuzzEncodeDecode:40000 \
  ./runtime/server:FuzzCompletionRequest:100000 \
  ./runtime/server:FuzzChatRequest:50000 \
  ./tokenizer/chat:FuzzRender:20000 \
  ./bench:FuzzSSE:60000 \
  ./bench:FuzzParseResult:25000 \
  ./kl:FuzzParsePrompts:20000 \
  ./kl:FuzzParsePromptLogprobs:30000 \
  ./checkpoint/hub:FuzzParseBatchResponse:100000 \
  ./arena:FuzzValidateCompletion:50000 \
  ./arena:FuzzParseProcNetTCP:50000 \
  ./format:FuzzE4M3RoundTrip:300000; do
  IFS=: read -r pkg name n <<<"$t"
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$((n * scale))x" -fuzzminimizetime=100x "$pkg"
done
