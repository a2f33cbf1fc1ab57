#!/usr/bin/env bash
# The project's tests, as CI runs them: formatting, vet, a cgo-free build, the
# unit tests (GPU tests skip where no GPU is present), and short fuzz runs of
# every parser of outside input.
#
#   ./scripts/test.sh            # everything (a few minutes on 2 cores)
#   FUZZTIME=30s ./scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
fuzztime=${FUZZTIME:-10s}

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
echo "== fuzz ($fuzztime each)"
# Each fuzz target of a parser of outside input, listed as package:target.
for t in \
  ./checkpoint:FuzzParseHeader \
  ./checkpoint:FuzzParseIndex \
  ./checkpoint:FuzzParseConfig \
  ./checkpoint:FuzzParseQuantizationConfig \
  ./calibrate/stats:FuzzParseName \
  ./calibrate/stats:FuzzParseMeta \
  ./calibrate/stats:FuzzIndexHeader \
  ./tokenizer:FuzzEncodeDecode \
  ./format:FuzzE4M3RoundTrip; do
  pkg=${t%%:*} name=${t##*:}
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime=1s "$pkg"
done
