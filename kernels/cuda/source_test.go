package cuda

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestSources: every kernel file opens with a comment naming itself and
// saying what it computes, and the program holds every kernel the Go side
// launches. Runs without a GPU.
func TestSources(t *testing.T) {
	names, err := fs.Glob(sources, "cu/*.cu")
	if err != nil || len(names) == 0 {
		t.Fatalf("no kernel sources: %v", err)
	}
	for _, n := range names {
		b, _ := sources.ReadFile(n)
		base := strings.TrimPrefix(n, "cu/")
		if !strings.HasPrefix(string(b), "// "+base+": ") {
			t.Errorf("%s does not open with \"// %s: what it computes\"", n, base)
		}
	}
	src, err := Source()
	if err != nil {
		t.Fatal(err)
	}
	// NVRTC compiles the files as one program: a helper defined twice is a
	// compile error only the GPU machine would report.
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^__device__ __forceinline__ [\w ]+?\*?\s*(\w+)\(`).FindAllStringSubmatch(src, -1) {
		if seen[m[1]] {
			t.Errorf("device function %s defined twice", m[1])
		}
		seen[m[1]] = true
	}
	if len(seen) < 10 {
		t.Errorf("found only %d device functions: the pattern no longer matches the sources", len(seen))
	}
	for _, k := range []string{"lb_matmul", "lb_act_quant", "lb_rmsnorm", "lb_rope", "lb_kv_write",
		"lb_silu_mul", "lb_add", "lb_log_softmax", "lb_embed", "lb_gather_rows", "lb_attention_split", "lb_attention_merge", "lb_kv_write_varlen",
		"lb_mma_tile", "lb_mma_split", "lb_mma_gemv", "lb_mma_gemv_wide", "lb_mma_gemm", "lb_flash_merge", "lb_topk_chunks", "lb_topk_merge", "lb_topk_ties", "lb_to_bf16", "lb_flash_d128_k1_whole", "lb_flash_d128_k1_split", "lb_flash_d64_k3_split", "lb_flash_d16_k3_whole", "lb_flash_d128_k1_whole_q1", "lb_flash_d128_k1_split_p", "lb_flash_d64_k1_whole_q1_p"} {
		if !regexp.MustCompile(`extern "C" __global__ void (__\w+__\([^)]*\)\s+)*` + k + `\(`).MatchString(src) {
			t.Errorf("kernel %s missing from the program", k)
		}
	}
}

// TestKernelsWaitFirst: every kernel begins with lb_pdl_wait (after its
// extern shared declaration), since with LOWBIT_PDL a kernel may start
// before the one before it ends and must not read what that one writes
// until it has waited. lb_mma_gemv and lb_mma_gemv_bulk start their weight
// copies first (weights never change) and wait before their loops, and
// lb_flash_decode_* its older cache rows' copies. Runs without a GPU.
func TestKernelsWaitFirst(t *testing.T) {
	src, err := Source()
	if err != nil {
		t.Fatal(err)
	}
	head := regexp.MustCompile(`extern "C" __global__\s+void\s+(?:__\w+__\([^)]*\)\s*)*(lb_\w+)\s*\(`)
	shared := regexp.MustCompile(`^\s*extern __shared__[^;]*;`)
	// bodyAt returns the body of the function whose parameter list opens
	// at src[i]: from past its closing parenthesis, the brace-matched block.
	bodyAt := func(i int) string {
		for depth := 0; ; i++ {
			if src[i] == '(' {
				depth++
			} else if src[i] == ')' {
				if depth--; depth == 0 {
					break
				}
			}
		}
		open := i + strings.IndexByte(src[i:], '{')
		end := open
		for depth := 0; ; end++ {
			if src[end] == '{' {
				depth++
			} else if src[end] == '}' {
				if depth--; depth == 0 {
					break
				}
			}
		}
		return src[open+1 : end]
	}
	// Kernels that start their weight copies before they wait, in their
	// body or in the chain of helpers they call (each calling the next, the
	// last waiting).
	copiesFirst := map[string]string{"lb_mma_gemv": "", "lb_mma_gemv_bulk": "mma_gemv_bulk mma_bulk_spans",
		"lb_mma_gemv_bulk1": "mma_gemv_bulk mma_bulk_spans", "lb_mma_gemv_bulk1_rms": "mma_gemv_bulk mma_bulk_spans",
		"lb_mma_gemv_bulk1_silu": "mma_bulk_spans",
		"lb_mma_gemv_tiles1_m2":  "mma_gemv_tiles1", "lb_mma_gemv_tiles1_m4": "mma_gemv_tiles1"}
	// The decode attention copies the cache rows that earlier steps wrote
	// first.
	for _, v := range []string{"d64", "d64_q1", "d128", "d128_q1", "d64_fp8", "d64_q1_fp8", "d128_fp8", "d128_q1_fp8"} {
		copiesFirst["lb_flash_decode_"+v] = "fd_run"
	}
	// waitsVia says whether body calls the first helper of chain, each
	// helper the next, and the last lb_pdl_wait.
	waitsVia := func(body string, chain []string) bool {
		for _, h := range chain {
			def := regexp.MustCompile(`void\s+` + h + `\s*\(`).FindStringIndex(src)
			if !regexp.MustCompile(`\b`+h+`\s*[<(]`).MatchString(body) || def == nil {
				return false
			}
			body = bodyAt(def[1] - 1)
		}
		return strings.Contains(body, "lb_pdl_wait();")
	}
	n := 0
	for _, m := range head.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		body := shared.ReplaceAllString(bodyAt(m[1]-1), "")
		n++
		helper, early := copiesFirst[name]
		switch {
		case early && helper != "":
			if !waitsVia(body, strings.Fields(helper)) {
				t.Errorf("%s: its helpers %s never call lb_pdl_wait", name, helper)
			}
		case early:
			if !strings.Contains(body, "lb_pdl_wait();") {
				t.Errorf("%s never calls lb_pdl_wait", name)
			}
		case !strings.HasPrefix(strings.TrimSpace(body), "lb_pdl_wait();"):
			t.Errorf("%s does not begin with lb_pdl_wait()", name)
		}
	}
	if n < 50 {
		t.Errorf("found only %d kernels: the pattern no longer matches the sources", n)
	}
}
