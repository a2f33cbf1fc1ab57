package server

import (
	"bytes"
	"encoding/json"
)

// What a chat template sees must keep the request's JSON as Python's
// json.loads gives it: object keys in order (Qwen3's template writes each
// tool with tojson, so a tool schema's key order reaches the prompt) and
// ints apart from floats. tokenizer/chat keeps both for json.RawMessage
// values, so the server hands nested values over raw, rebuilding only the
// objects vLLM itself rewrites (tools, tool call arguments).

// kv is one member of a JSON object.
type kv struct {
	k string
	v json.RawMessage
}

// objectPairs returns raw's members in order (duplicates included), or
// false if raw is not an object.
func objectPairs(raw json.RawMessage) ([]kv, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var out []kv
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, false
		}
		k, _ := kt.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, kv{k, v})
	}
	return out, true
}

// lookup returns the value of k (the last one, as Python keeps).
func lookup(pairs []kv, k string) (json.RawMessage, bool) {
	for i := len(pairs) - 1; i >= 0; i-- {
		if pairs[i].k == k {
			return pairs[i].v, true
		}
	}
	return nil, false
}

// buildObject writes pairs as an object, a repeated key keeping its first
// place and last value, as a Python dict built from them would.
func buildObject(pairs []kv) json.RawMessage {
	var keys []string
	vals := map[string]json.RawMessage{}
	for _, p := range pairs {
		if _, seen := vals[p.k]; !seen {
			keys = append(keys, p.k)
		}
		vals[p.k] = p.v
	}
	b := []byte{'{'}
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, marshal(k)...)
		b = append(b, ':')
		b = append(b, vals[k]...)
	}
	return append(b, '}')
}

// rawList splits a JSON array into its elements, or false.
func rawList(raw json.RawMessage) ([]json.RawMessage, bool) {
	var l []json.RawMessage
	if err := json.Unmarshal(raw, &l); err != nil || l == nil && !bytes.Equal(bytes.TrimSpace(raw), []byte("[]")) {
		return nil, false
	}
	return l, true
}

// isNull reports a JSON null.
func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// decodeAny decodes raw with numbers kept as json.Number.
func decodeAny(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return v
}
