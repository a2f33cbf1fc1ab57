package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// cfgObject is one JSON object of a config file with typed, strict accessors.
// Every accessor treats an absent key and an explicit null alike (the Python
// config classes turn both into their default), and rejects a value of the
// wrong JSON type instead of coercing it: "hidden_size": "4096" is an error,
// not 4096. Errors name the key by its dotted path from the top of the file.
type cfgObject struct {
	path string // "" for the top level, else e.g. "text_config"
	m    map[string]json.RawMessage
}

// parseCfgObject decodes data as a JSON object. path names it in errors.
func parseCfgObject(path string, data []byte) (cfgObject, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		where := "config"
		if path != "" {
			where = path
		}
		return cfgObject{}, cfgErrorf("%s: not a JSON object: %v", where, err)
	}
	if m == nil { // the literal null
		return cfgObject{}, cfgErrorf("%s: want an object, got null", cfgOr(path, "config"))
	}
	return cfgObject{path: path, m: m}, nil
}

func cfgOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// key returns the dotted path of key within o, for error messages.
func (o cfgObject) key(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

// raw returns the value of key and whether it is present and not null.
func (o cfgObject) raw(key string) (json.RawMessage, bool) {
	v, ok := o.m[key]
	if !ok {
		return nil, false
	}
	v = bytes.TrimSpace(v)
	if len(v) == 0 || string(v) == "null" {
		return nil, false
	}
	return v, true
}

// has reports whether key is present with a non-null value.
func (o cfgObject) has(key string) bool {
	_, ok := o.raw(key)
	return ok
}

// jsonKind names the JSON type of a raw value, for error messages.
func jsonKind(v json.RawMessage) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func (o cfgObject) wrongType(key, want string, v json.RawMessage) error {
	return cfgErrorf("%s: want %s, got %s", o.key(key), want, jsonKind(v))
}

// parseJSONInt parses a JSON number that must be an integer literal (no
// fraction or exponent: 4096.0 and 4e3 are rejected) within int range.
func parseJSONInt(v json.RawMessage) (int, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < math.MinInt || n > math.MaxInt {
		return 0, false
	}
	return int(n), true
}

// parseJSONFloat parses any finite JSON number.
func parseJSONFloat(v json.RawMessage) (float64, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// int returns the integer at key, or def when it is absent or null.
func (o cfgObject) int(key string, def int) (int, error) {
	v, ok := o.raw(key)
	if !ok {
		return def, nil
	}
	n, ok := parseJSONInt(v)
	if !ok {
		if jsonKind(v) == "a number" {
			return 0, cfgErrorf("%s: want an integer, got %s", o.key(key), v)
		}
		return 0, o.wrongType(key, "an integer", v)
	}
	return n, nil
}

// float returns the number at key (integer or not), or def.
func (o cfgObject) float(key string, def float64) (float64, error) {
	v, ok := o.raw(key)
	if !ok {
		return def, nil
	}
	f, ok := parseJSONFloat(v)
	if !ok {
		if jsonKind(v) == "a number" {
			return 0, cfgErrorf("%s: number %s out of range", o.key(key), v)
		}
		return 0, o.wrongType(key, "a number", v)
	}
	return f, nil
}

// bool returns the boolean at key, or def.
func (o cfgObject) bool(key string, def bool) (bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return def, nil
	}
	switch string(v) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, o.wrongType(key, "a boolean", v)
}

// string returns the string at key, or def.
func (o cfgObject) string(key, def string) (string, error) {
	v, ok := o.raw(key)
	if !ok {
		return def, nil
	}
	if v[0] != '"' {
		return "", o.wrongType(key, "a string", v)
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", cfgErrorf("%s: %v", o.key(key), err)
	}
	return s, nil
}

// array returns the elements of the array at key; ok is false when absent.
func (o cfgObject) array(key string) (elems []json.RawMessage, ok bool, err error) {
	v, ok := o.raw(key)
	if !ok {
		return nil, false, nil
	}
	if v[0] != '[' {
		return nil, false, o.wrongType(key, "an array", v)
	}
	if err := json.Unmarshal(v, &elems); err != nil {
		return nil, false, cfgErrorf("%s: %v", o.key(key), err)
	}
	return elems, true, nil
}

// ints returns the integer array at key; ok is false when absent.
func (o cfgObject) ints(key string) ([]int, bool, error) {
	elems, ok, err := o.array(key)
	if !ok || err != nil {
		return nil, false, err
	}
	out := make([]int, len(elems))
	for i, e := range elems {
		n, ok := parseJSONInt(bytes.TrimSpace(e))
		if !ok {
			return nil, false, cfgErrorf("%s[%d]: want an integer, got %s", o.key(key), i, jsonKind(bytes.TrimSpace(e)))
		}
		out[i] = n
	}
	return out, true, nil
}

// floats returns the number array at key; ok is false when absent.
func (o cfgObject) floats(key string) ([]float64, bool, error) {
	elems, ok, err := o.array(key)
	if !ok || err != nil {
		return nil, false, err
	}
	out := make([]float64, len(elems))
	for i, e := range elems {
		f, ok := parseJSONFloat(bytes.TrimSpace(e))
		if !ok {
			return nil, false, cfgErrorf("%s[%d]: want a number, got %s", o.key(key), i, jsonKind(bytes.TrimSpace(e)))
		}
		out[i] = f
	}
	return out, true, nil
}

// strings returns the string array at key; ok is false when absent.
func (o cfgObject) strings(key string) ([]string, bool, error) {
	elems, ok, err := o.array(key)
	if !ok || err != nil {
		return nil, false, err
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		e = bytes.TrimSpace(e)
		if len(e) == 0 || e[0] != '"' {
			return nil, false, cfgErrorf("%s[%d]: want a string, got %s", o.key(key), i, jsonKind(e))
		}
		if err := json.Unmarshal(e, &out[i]); err != nil {
			return nil, false, cfgErrorf("%s[%d]: %v", o.key(key), i, err)
		}
	}
	return out, true, nil
}

// intOrInts returns the value at key, which may be one integer or an array of
// integers (as eos_token_id is), as a slice; nil when absent.
func (o cfgObject) intOrInts(key string) ([]int, error) {
	v, ok := o.raw(key)
	if !ok {
		return nil, nil
	}
	if v[0] == '[' {
		ids, _, err := o.ints(key)
		return ids, err
	}
	n, ok := parseJSONInt(v)
	if !ok {
		return nil, o.wrongType(key, "an integer or an array of integers", v)
	}
	return []int{n}, nil
}

// object returns the object at key; ok is false when absent or null.
func (o cfgObject) object(key string) (cfgObject, bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return cfgObject{}, false, nil
	}
	if v[0] != '{' {
		return cfgObject{}, false, o.wrongType(key, "an object", v)
	}
	obj, err := parseCfgObject(o.key(key), v)
	if err != nil {
		return cfgObject{}, false, err
	}
	return obj, true, nil
}

// objects calls f for each member of o, in sorted key order, with the
// member as an object; a member that is null or not an object is an error.
func (o cfgObject) objects(f func(name string, member cfgObject) error) error {
	names := make([]string, 0, len(o.m))
	for name := range o.m {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		member, ok, err := o.object(name)
		if err != nil {
			return err
		}
		if !ok {
			return cfgErrorf("%s is null", o.key(name))
		}
		if err := f(name, member); err != nil {
			return err
		}
	}
	return nil
}

// cfgErrorf returns an error wrapping ErrInvalidConfig.
func cfgErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}
