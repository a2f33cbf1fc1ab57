package server

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
)

// Responses are written the way vLLM's pydantic and Starlette write them:
// compact separators, UTF-8 as is (no \u escapes, no HTML escaping of <, >
// and &, which matter for tokens like "<|im_end|>"), object keys in the
// order of the Python models, and floats as Python's repr prints them.

// marshal encodes v compactly without HTML escaping.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Every value marshalled here is built by this package from
		// strings, numbers and the types below; a failure is a bug.
		panic("server: marshal: " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body := marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// pyFloat is a float written as Python's repr writes it ("-0.5", "-9999.0",
// "1e-05"), so numbers look exactly like vLLM's. Logprobs are float32
// values widened to float64, as torch's tolist() gives Python.
type pyFloat float64

func (f pyFloat) MarshalJSON() ([]byte, error) {
	return appendPyFloat(nil, float64(f)), nil
}

// appendPyFloat appends repr(x): the shortest round-trip digits, fixed
// notation for exponents -4..15 with at least one decimal, else d.ddde±XX.
// Infinities and NaN become Python's json tokens; callers clamp -inf to
// -9999.0 first, as vLLM does.
func appendPyFloat(b []byte, x float64) []byte {
	switch {
	case math.IsNaN(x):
		return append(b, "NaN"...)
	case math.IsInf(x, 1):
		return append(b, "Infinity"...)
	case math.IsInf(x, -1):
		return append(b, "-Infinity"...)
	}
	if x == 0 {
		if math.Signbit(x) {
			return append(b, "-0.0"...)
		}
		return append(b, "0.0"...)
	}
	exp := int(math.Floor(math.Log10(math.Abs(x))))
	// Log10 can be off by one near powers of ten; the 'e' format knows.
	e := strconv.AppendFloat(nil, x, 'e', -1, 64)
	if i := bytes.IndexByte(e, 'e'); i >= 0 {
		if v, err := strconv.Atoi(string(e[i+1:])); err == nil {
			exp = v
		}
	}
	if exp < -4 || exp >= 16 {
		return append(b, e...) // Go writes at least two exponent digits, as Python
	}
	start := len(b)
	b = strconv.AppendFloat(b, x, 'f', -1, 64)
	if bytes.IndexByte(b[start:], '.') < 0 {
		b = append(b, ".0"...)
	}
	return b
}

// clampLogprob is vLLM's max(logprob, -9999.0): -inf becomes the finite
// placeholder OpenAI uses.
func clampLogprob(x float32) pyFloat {
	v := float64(x)
	if math.IsNaN(v) || v < -9999.0 {
		return -9999.0
	}
	return pyFloat(v)
}

// orderedObject is a JSON object whose keys keep insertion order, for the
// Python dicts vLLM returns (prompt_logprobs entries, completion
// top_logprobs). Setting an existing key replaces its value in place, as a
// Python dict does.
type orderedObject struct {
	keys  []string
	vals  []any
	index map[string]int // built once the object grows (prompt_logprobs -1 has the whole vocabulary)
}

func (o *orderedObject) set(k string, v any) {
	if o.index == nil && len(o.keys) >= 32 {
		o.index = make(map[string]int, 2*len(o.keys))
		for i, kk := range o.keys {
			o.index[kk] = i
		}
	}
	if o.index != nil {
		if i, ok := o.index[k]; ok {
			o.vals[i] = v
			return
		}
		o.index[k] = len(o.keys)
	} else {
		for i, kk := range o.keys {
			if kk == k {
				o.vals[i] = v
				return
			}
		}
	}
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

func (o *orderedObject) MarshalJSON() ([]byte, error) {
	if o == nil {
		return []byte("null"), nil
	}
	b := []byte{'{'}
	for i, k := range o.keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, marshal(k)...)
		b = append(b, ':')
		b = append(b, marshal(o.vals[i])...)
	}
	return append(b, '}'), nil
}
