package arena

import (
	"fmt"
	"slices"
	"strings"
)

// Contract lists LowBArena's environment variables; the first seven must be
// set on every start, GENERATION_CONFIG and LANGUAGE_MODEL_ONLY may be
// empty (the stock launch.sh passes their flags only when set).
var Contract = []string{"ARTIFACT", "TOKENIZER", "PORT", "SERVED_NAME", "MAX_MODEL_LEN",
	"GPU_MEMORY_UTILIZATION", "KV_CACHE_DTYPE", "GENERATION_CONFIG", "LANGUAGE_MODEL_ONLY"}

// LaunchOptions are the settings baked into launch.sh: what the arena does
// not set.
type LaunchOptions struct {
	// Device is lowbit serve's --device: cuda (the default) on the arena's
	// B200, where auto's fallback to the CPU would only fail slowly; cpu to
	// check the directory on a machine without a GPU.
	Device string
	// PrefixCaching keeps lowbit's prefix cache on; off by default, as the
	// stock launch.sh turns vLLM's off (the timed prompts never repeat).
	PrefixCaching bool
	// MaxNumSeqs and MaxNumBatchedTokens bound the batch; zero leaves
	// lowbit serve's defaults for the device (tuned for it, where the stock
	// engine's 256 and 8192 were tuned for vLLM).
	MaxNumSeqs, MaxNumBatchedTokens int
	// PrefillActivations is lowbit serve's --prefill-activations: "" is
	// bf16 on cuda (prompt tokens on BF16 activations, as the arena's
	// reference engine computes them; several times faster prefill) and
	// float32 elsewhere.
	PrefillActivations string
	// DecodeActivations is lowbit serve's --decode-activations: "" is bf16
	// where prefill activations are bf16 (generated tokens on BF16
	// activations too, as the reference engine decodes; 2.80x instead of
	// 2.64x transformers on the scaled serve workload, BENCHMARKS.md) and
	// float32 elsewhere.
	DecodeActivations string
}

// serveFlagsUsed are the `lowbit serve` flags launch.sh passes; each must
// be among those the binary lists. --language-model-only is passed only
// when LANGUAGE_MODEL_ONLY is set, so its absence is a warning.
var serveFlagsUsed = []string{"tokenizer", "served-model-name", "host", "port", "max-model-len",
	"gpu-memory-utilization", "max-num-seqs", "max-num-batched-tokens", "generation-config",
	"kv-cache-dtype", "seed", "device", "no-enable-prefix-caching", "prefill-activations", "decode-activations"}

const languageModelOnlyFlag = "language-model-only"

func (o *LaunchOptions) fill() error {
	switch o.Device {
	case "":
		o.Device = "cuda"
	case "cuda", "cpu", "auto":
	default:
		return fmt.Errorf("arena: device %q: choose cuda (the arena's GPU), cpu or auto", o.Device)
	}
	switch o.PrefillActivations {
	case "":
		o.PrefillActivations = "float32"
		if o.Device == "cuda" {
			o.PrefillActivations = "bf16"
		}
	case "float32":
	case "bf16":
		if o.Device != "cuda" {
			return fmt.Errorf("arena: prefill activations bf16 need --device cuda, not %s", o.Device)
		}
	default:
		return fmt.Errorf("arena: prefill activations %q: choose float32 or bf16", o.PrefillActivations)
	}
	switch o.DecodeActivations {
	case "":
		o.DecodeActivations = o.PrefillActivations
	case "float32":
	case "bf16":
		if o.PrefillActivations != "bf16" {
			return fmt.Errorf("arena: decode activations bf16 need prefill activations bf16, not %s", o.PrefillActivations)
		}
	default:
		return fmt.Errorf("arena: decode activations %q: choose float32 or bf16", o.DecodeActivations)
	}
	if o.MaxNumSeqs < 0 || o.MaxNumBatchedTokens < 0 {
		return fmt.Errorf("arena: max-num-seqs %d and max-num-batched-tokens %d: want positive numbers (or 0 for lowbit serve's defaults)",
			o.MaxNumSeqs, o.MaxNumBatchedTokens)
	}
	return nil
}

// LaunchScript returns launch.sh. Its serve step checks the contract's
// variables, then execs bin/lowbit serve with them; it reads them on every
// start and keeps nothing between starts except a copy of the binary when
// the directory's lost its executable bit.
func LaunchScript(o LaunchOptions, version string) (string, error) {
	if err := o.fill(); err != nil {
		return "", err
	}
	var required []string
	for _, v := range Contract {
		if v != "GENERATION_CONFIG" && v != "LANGUAGE_MODEL_ONLY" {
			required = append(required, v)
		}
	}
	prefix := " --no-enable-prefix-caching"
	if o.PrefixCaching {
		prefix = ""
	}
	batch := ""
	if o.MaxNumSeqs > 0 {
		batch += fmt.Sprintf(" --max-num-seqs %d", o.MaxNumSeqs)
	}
	if o.MaxNumBatchedTokens > 0 {
		batch += fmt.Sprintf(" --max-num-batched-tokens %d", o.MaxNumBatchedTokens)
	}
	r := strings.NewReplacer("@VERSION@", version, "@REQUIRED@", strings.Join(required, " "), "@DEVICE@", o.Device,
		"@BATCH@", batch, "@PREFIX@", prefix, "@PREFILL@", o.PrefillActivations, "@DECODE@", o.DecodeActivations)
	return r.Replace(launchTemplate), nil
}

const launchTemplate = `#!/usr/bin/env bash
# LowBArena engine written by lowbit engine (lowbit @VERSION@).
#
# launch.sh serve serves $ARTIFACT with lowbit's own server and kernels on
# 127.0.0.1:$PORT. Every variable of the arena's contract is read on every
# start: the arena restarts the server with other values under memory caps.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

case "${1:-}" in
serve)
  for v in @REQUIRED@; do
    if [ -z "${!v:-}" ]; then
      echo "launch.sh: $v is not set; LowBArena sets it on every start (see its engine contract)" >&2
      exit 2
    fi
  done
  bin="$here/bin/lowbit"
  if [ ! -x "$bin" ]; then
    # A download can lose the executable bit, and the engine directory is
    # read-only: run a copy from $HOME, which the arena keeps across starts.
    cache="${HOME:?HOME is not set}/.cache/lowbit-engine"
    mkdir -p "$cache"
    cp "$bin" "$cache/lowbit.$$"
    chmod 755 "$cache/lowbit.$$"
    mv -f "$cache/lowbit.$$" "$cache/lowbit"
    bin="$cache/lowbit"
  fi
  # exec: the server is this process, so the arena's signals reach it.
  exec "$bin" serve "$ARTIFACT" \
    --tokenizer "$TOKENIZER" \
    --served-model-name "$SERVED_NAME" \
    --host 127.0.0.1 --port "$PORT" \
    --max-model-len "$MAX_MODEL_LEN" \
    --gpu-memory-utilization "$GPU_MEMORY_UTILIZATION"@BATCH@ \
    ${GENERATION_CONFIG:+--generation-config "$GENERATION_CONFIG"} \
    --kv-cache-dtype "$KV_CACHE_DTYPE"@PREFIX@ --seed 0 \
    --device @DEVICE@ --prefill-activations @PREFILL@ --decode-activations @DECODE@ \
    ${LANGUAGE_MODEL_ONLY:+--language-model-only}
  ;;
*)
  echo "usage: launch.sh serve (with LowBArena's environment: @REQUIRED@, GENERATION_CONFIG, LANGUAGE_MODEL_ONLY)" >&2
  exit 2
  ;;
esac
`

// missingServeFlags returns the flags launch.sh passes that the binary's
// serve does not list, and whether --language-model-only is among them.
func missingServeFlags(listed []string) (missing []string, noLanguageModelOnly bool) {
	for _, f := range serveFlagsUsed {
		if !slices.Contains(listed, f) {
			missing = append(missing, "--"+f)
		}
	}
	return missing, !slices.Contains(listed, languageModelOnlyFlag)
}
