package arena

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Limits of LowBArena's engine field.
const (
	// InlineLimit is the most characters of base64 the inline form takes.
	InlineLimit = 2_800_000
	// URILimit is the most bytes a repository engine may hold.
	URILimit = 200 << 20
)

// LowBArenaOptions say how to make a LowBArena engine directory.
type LowBArenaOptions struct {
	// Binary is the lowbit to ship; "" is the running executable.
	Binary string
	// SourceRoot is the lowbit source tree to copy kernel sources from;
	// "" finds it from the working directory (none found: no sources,
	// with a warning).
	SourceRoot string
	Launch     LaunchOptions
	// Version is lowbit's version, written into launch.sh and ENGINE.md.
	Version string
}

// EngineResult says what an engine directory holds.
type EngineResult struct {
	Dir      string
	Binary   *BinaryInfo
	Kernels  []string
	Warnings []string
	// TarGzBytes is the directory as a gzipped tar; InlineChars its base64
	// length, against InlineLimit.
	TarGzBytes, InlineChars int64
}

// WriteLowBArena writes a LowBArena engine directory to out, which must not
// exist or be empty. It refuses a binary that cannot serve: not
// linux/amd64, built without cgo, or whose serve lacks a flag launch.sh
// passes.
func WriteLowBArena(out string, o LowBArenaOptions) (*EngineResult, error) {
	if err := o.Launch.fill(); err != nil {
		return nil, err
	}
	script, err := LaunchScript(o.Launch, o.Version)
	if err != nil {
		return nil, err
	}
	bin := o.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("arena: find the running lowbit: %w; pass --binary", err)
		}
	}
	info, err := InspectBinary(bin)
	if err != nil {
		return nil, err
	}
	res := &EngineResult{Dir: out, Binary: info}
	if info.ServeFlagsListed {
		missing, noLMO := missingServeFlags(info.ServeFlags)
		if len(missing) > 0 {
			return nil, fmt.Errorf("arena: %s serve does not accept %s, which launch.sh passes: build lowbit from a newer commit",
				bin, strings.Join(missing, ", "))
		}
		if noLMO {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s serve does not accept --language-model-only: "+
				"a start with LANGUAGE_MODEL_ONLY=1 (a checkpoint with a vision encoder, such as Qwen3.5's) will fail", bin))
		}
	} else {
		res.Warnings = append(res.Warnings, "the binary cannot run here, so its serve flags were not checked: run lowbit engine check on linux/amd64")
	}
	if v := info.GLIBC; versionLess(glibcLimit, v) {
		res.Warnings = append(res.Warnings, fmt.Sprintf("the binary needs glibc %s, newer than the arena image's %s: "+
			"build it on an older distribution (Ubuntu 22.04) or link it statically", v, glibcLimit))
	}
	if info.Revision == "" {
		res.Warnings = append(res.Warnings, "the binary records no source revision (built outside a checkout, or with -buildvcs=false): "+
			"ENGINE.md cannot say which source it was built from")
	}
	if info.Modified {
		res.Warnings = append(res.Warnings, "the binary was built from uncommitted changes: its revision does not identify its source")
	}
	root := o.SourceRoot
	if root == "" {
		wd, _ := os.Getwd()
		root = FindSourceRoot(wd)
	}
	err = buildDir(out, func(tmp string) error {
		if err := os.WriteFile(filepath.Join(tmp, "launch.sh"), []byte(script), 0o755); err != nil {
			return err
		}
		if err := copyFile(bin, filepath.Join(tmp, "bin", "lowbit"), 0o755); err != nil {
			return fmt.Errorf("arena: copy the binary: %w", err)
		}
		if root != "" {
			if res.Kernels, err = copyKernelSources(root, tmp); err != nil {
				return err
			}
		} else {
			res.Warnings = append(res.Warnings, "no lowbit source tree here (run from a checkout or pass --source): "+
				"the directory carries no kernel sources to read, only the binary that embeds them")
		}
		return os.WriteFile(filepath.Join(tmp, "ENGINE.md"), []byte(engineReadme(res, o)), 0o644)
	})
	if err != nil {
		return nil, err
	}
	if res.TarGzBytes, err = tarGzSize(out); err != nil {
		return nil, err
	}
	res.InlineChars = (res.TarGzBytes + 2) / 3 * 4
	return res, nil
}

// SubmitHint says how to send the directory: inline when it fits, else as a
// repository pinned to a commit.
func (r *EngineResult) SubmitHint() string {
	if r.InlineChars <= InlineLimit {
		return fmt.Sprintf(`fits the inline form (%d of %d characters): "engine": {"inline": "'"$(tar -C %s -cz . | base64 -w0)"'"}`,
			r.InlineChars, InlineLimit, r.Dir)
	}
	if r.TarGzBytes > URILimit {
		return fmt.Sprintf("too large for LowBArena: %d MiB compressed, over the 200 MiB a repository engine may hold", r.TarGzBytes>>20)
	}
	return fmt.Sprintf(`too large to send inline (%d characters of base64, limit %d): push it to a repository `+
		`(lowbit push --repo OWNER/NAME-engine %s) and submit "engine": {"uri": "OWNER/NAME-engine", "revision": "<the sha push prints>"}`,
		r.InlineChars, InlineLimit, r.Dir)
}

func engineReadme(r *EngineResult, o LowBArenaOptions) string {
	b := r.Binary
	var sb strings.Builder
	fmt.Fprintf(&sb, "# LowBArena engine: lowbit %s\n\n", o.Version)
	fmt.Fprintf(&sb, "Written by `lowbit engine --target lowbarena` on %s.\n\n", time.Now().UTC().Format("2006-01-02"))
	sb.WriteString("`launch.sh serve` execs `bin/lowbit serve \"$ARTIFACT\"` with LowBArena's environment mapped to\n")
	sb.WriteString("vLLM's flag names (TOKENIZER → --tokenizer, SERVED_NAME → --served-model-name, PORT → --port on\n")
	sb.WriteString("127.0.0.1, MAX_MODEL_LEN, GPU_MEMORY_UTILIZATION, GENERATION_CONFIG → --generation-config,\n")
	sb.WriteString("KV_CACHE_DTYPE → --kv-cache-dtype, LANGUAGE_MODEL_ONLY → --language-model-only), read on every start.\n")
	prefix := "off (--no-enable-prefix-caching, as the stock engine)"
	if o.Launch.PrefixCaching {
		prefix = "on"
	}
	batch := "lowbit serve's defaults for the device"
	if o.Launch.MaxNumSeqs > 0 || o.Launch.MaxNumBatchedTokens > 0 {
		batch = fmt.Sprintf("--max-num-seqs %d, --max-num-batched-tokens %d (0: lowbit serve's default)",
			o.Launch.MaxNumSeqs, o.Launch.MaxNumBatchedTokens)
	}
	fmt.Fprintf(&sb, "Baked in: --device %s, --prefill-activations %s, --decode-activations %s, --seed 0; batch limits: %s; prefix caching %s.\n\n",
		o.Launch.Device, o.Launch.PrefillActivations, o.Launch.DecodeActivations, batch, prefix)
	if o.Launch.Device == "cuda" {
		sb.WriteString("Scheduling is lowbit serve's `auto`: prefill-first with BF16 prefill (prompt chunks run alone while any\n")
		sb.WriteString("prompt can start; generated tokens wait), for throughput. `serving.kv_cache_dtype: fp8` halves the KV\n")
		sb.WriteString("cache's memory; on the H200 its attention is about 1.2x slower than the BF16 cache's, and the scaled\n")
		sb.WriteString("serve workload 2% slower (docs/gpu.md of lowbit's source).\n\n")
	}
	sb.WriteString("| file | what it is |\n| --- | --- |\n")
	sb.WriteString("| `launch.sh` | the arena's entry point |\n")
	fmt.Fprintf(&sb, "| `bin/lowbit` | %s/%s, cgo, %s, %d bytes, sha256 %s", b.GOOS, b.GOARCH, b.GoVersion, b.Size, b.SHA256)
	if b.Revision != "" {
		fmt.Fprintf(&sb, ", source revision %s", b.Revision)
		if b.Modified {
			sb.WriteString(" with uncommitted changes")
		}
	}
	if b.GLIBC != "" {
		fmt.Fprintf(&sb, ", needs glibc %s", b.GLIBC)
	}
	sb.WriteString(" |\n")
	if len(r.Kernels) > 0 {
		fmt.Fprintf(&sb, "| `kernels/` | the %d C and CUDA kernel sources of the source tree it was packaged from, to read: "+
			"the binary embeds them (C compiled in; CUDA compiled at the first start by NVRTC and cached under $HOME) |\n", len(r.Kernels))
	}
	sb.WriteString("\nCheck it as the arena starts it: `lowbit engine check DIR --artifact MODEL`.\n")
	return sb.String()
}
