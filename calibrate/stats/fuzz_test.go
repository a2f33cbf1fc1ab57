package stats

import (
	"slices"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// FuzzParseName: a name parses only into a valid module and a known suffix
// that join back into it.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{
		"model.layers.0.self_attn.q_proj.input_absmax",
		"model.layers.0.mlp.experts.3.gate_proj.hessian",
		"model.layers.0.self_attn.k_head_absmax",
		"x.hessian_tokens", ".input_absmax", "a..b.v_absmax", "input_absmax", "a.b.", "a.b-c.k_absmax", "é.k_absmax",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		module, suffix, err := parseName(name)
		if err != nil {
			return
		}
		if module+"."+suffix != name {
			t.Fatalf("parseName(%q) = %q, %q", name, module, suffix)
		}
		if _, ok := suffixes[suffix]; !ok {
			t.Fatalf("unknown suffix %q accepted", suffix)
		}
		if err := checkModule(module); err != nil {
			t.Fatalf("module %q accepted by parseName but not checkModule: %v", module, err)
		}
		if strings.HasPrefix(module, ".") || strings.HasSuffix(module, ".") || strings.Contains(module, "..") {
			t.Fatalf("bad module %q accepted", module)
		}
	})
}

// FuzzParseMeta: accepted metadata round-trips through encode exactly.
func FuzzParseMeta(f *testing.F) {
	m := testMeta().encode()
	f.Add(m[keyVersion], m[keyModelType], m[keyConfigSHA256], m[keySamples], m[keyTokens], m[keySeqLen], m[keyDataset], m[keyCreatedBy])
	f.Add("1", "qwen3", strings.Repeat("0", 64), "1", "1", "1", "", "")
	f.Add("1", "qwen3", strings.Repeat("a", 64), "9223372036854775807", "9223372036854775807", "1", "d", "c")
	f.Add("1", "q", strings.Repeat("f", 64), "3", "10", "3", "d", "c")
	f.Add("2", "qwen3", "x", "-0", "00", "+1", "\xff", "c")
	f.Fuzz(func(t *testing.T, version, modelType, sha, samples, tokens, seqLen, dataset, createdBy string) {
		md := map[string]string{
			keyVersion: version, keyModelType: modelType, keyConfigSHA256: sha, keySamples: samples,
			keyTokens: tokens, keySeqLen: seqLen, keyDataset: dataset, keyCreatedBy: createdBy,
		}
		meta, err := parseMeta(md)
		if err != nil {
			return
		}
		if meta.Tokens > meta.Samples*meta.SeqLen && meta.Samples*meta.SeqLen/meta.Samples == meta.SeqLen {
			t.Fatalf("tokens %d > samples %d × seq_len %d accepted", meta.Tokens, meta.Samples, meta.SeqLen)
		}
		enc := meta.encode()
		for k, v := range md {
			if enc[k] != v {
				t.Fatalf("%s = %q re-encodes as %q", k, v, enc[k])
			}
		}
		if err := meta.validate(); err != nil {
			t.Fatalf("parsed metadata fails validate: %v", err)
		}
	})
}

// FuzzIndexHeader feeds arbitrary safetensors headers to indexHeader, which
// must never panic, and checks what it accepts.
func FuzzIndexHeader(f *testing.F) {
	f.Add([]byte(`{"m.input_absmax":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"m.input_channel_absmax":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"m.input_mean_abs":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}`), int64(20))
	f.Add([]byte(`{"m.input_absmax":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"m.input_channel_absmax":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"m.input_mean_abs":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"m.hessian":{"dtype":"F32","shape":[1,1],"data_offsets":[12,16]},"m.hessian_tokens":{"dtype":"I64","shape":[1],"data_offsets":[16,24]}}`), int64(24))
	f.Add([]byte(`{"a.k_absmax":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a.v_absmax":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a.k_head_absmax":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}}`), int64(8))
	f.Add([]byte(`{"a.k_absmax":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`), int64(4))
	f.Fuzz(func(t *testing.T, hdr []byte, size int64) {
		h, err := checkpoint.ParseHeader(hdr, size)
		if err != nil {
			return
		}
		linears, attns, err := indexHeader(h)
		if err != nil {
			return
		}
		for m, l := range linears {
			n := l.in()
			if n < 1 || !equalShape(l.mean.Shape, int64(n)) || !equalShape(l.absmax.Shape, 1) {
				t.Fatalf("linear %s accepted with shapes %v %v %v", m, l.absmax.Shape, l.channel.Shape, l.mean.Shape)
			}
			if l.hasHessian && (!equalShape(l.hessian.Shape, int64(n), int64(n)) || !equalShape(l.tokens.Shape, 1)) {
				t.Fatalf("linear %s accepted with Hessian shapes %v %v", m, l.hessian.Shape, l.tokens.Shape)
			}
			if _, dup := attns[m]; dup {
				t.Fatalf("module %s is both linear and attention", m)
			}
		}
		for m, a := range attns {
			if !equalShape(a.k.Shape, 1) || !equalShape(a.v.Shape, 1) || (a.hasHeads && (len(a.heads.Shape) != 1 || a.heads.Shape[0] < 1)) {
				t.Fatalf("attention %s accepted with shapes %v %v %v", m, a.k.Shape, a.v.Shape, a.heads.Shape)
			}
		}
	})
}

func equalShape(s []int64, dims ...int64) bool { return slices.Equal(s, dims) }
