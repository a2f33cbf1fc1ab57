package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxExactFloatInt is 2^53: integral float64s below it stand for JSON
// integers (see toValue).
const maxExactFloatInt = 1 << 53

// toValue converts a JSON-shaped Go value into the engine's value, keeping
// the distinctions that Python's json module keeps, since tojson and
// printing show them: int versus float, and object key order.
//
//   - json.RawMessage (anywhere in the tree) is decoded with its key order
//     and its int/float spelling, exactly as Python's json.loads would.
//   - json.Number is an int when spelled without '.', 'e' or 'E'.
//   - A float64 that is integral and below 2^53 becomes an int: that is what
//     encoding/json's default decoding makes of a JSON integer, and integers
//     are what tool schemas hold (a source "1.0" is lost there; pass
//     json.RawMessage or json.Number to keep it).
//   - map[string]any has no order; its keys are sorted, for determinism.
func toValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case nil:
		return jinja.None(), nil
	case jinja.Value:
		return x, nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case int32:
		return jinja.NewInt(int64(x)), nil
	case float64:
		return floatValue(x), nil
	case float32:
		return floatValue(float64(x)), nil
	case json.Number:
		return numberValue(string(x)), nil
	case json.RawMessage:
		return decodeJSON(x)
	case []any:
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			ev, err := toValue(e)
			if err != nil {
				return jinja.Value{}, err
			}
			items[i] = ev
		}
		return jinja.NewList(items), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			ev, err := toValue(x[k])
			if err != nil {
				return jinja.Value{}, err
			}
			d.AsDict().Set(k, ev)
		}
		return d, nil
	}
	return reflectValue(reflect.ValueOf(v))
}

// reflectValue handles the other integer types and named slice and map
// types (e.g. []map[string]any) that the type switch does not name.
func reflectValue(rv reflect.Value) (jinja.Value, error) {
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return jinja.NewInt(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if u := rv.Uint(); u <= math.MaxInt64 {
			return jinja.NewInt(int64(u)), nil
		}
		return jinja.NewFloat(float64(rv.Uint())), nil
	case reflect.Slice, reflect.Array:
		items := make([]jinja.Value, rv.Len())
		for i := range items {
			ev, err := toValue(rv.Index(i).Interface())
			if err != nil {
				return jinja.Value{}, err
			}
			items[i] = ev
		}
		return jinja.NewList(items), nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		m := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			m[it.Key().String()] = it.Value().Interface()
		}
		return toValue(m)
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return jinja.None(), nil
		}
		return toValue(rv.Elem().Interface())
	}
	return jinja.Value{}, fmt.Errorf("chat: a template value of type %s is not JSON-shaped", rv.Type())
}

func floatValue(f float64) jinja.Value {
	if f == math.Trunc(f) && math.Abs(f) < maxExactFloatInt && !(f == 0 && math.Signbit(f)) {
		return jinja.NewInt(int64(f))
	}
	return jinja.NewFloat(f)
}

// numberValue follows json.loads: an int unless the spelling has a
// fraction or exponent. Integers beyond int64 become floats (Python would
// keep them exact; no chat template depends on that).
func numberValue(s string) jinja.Value {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(i)
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return jinja.NewString(s)
	}
	return jinja.NewFloat(f)
}

// decodeJSON decodes raw with object key order kept.
func decodeJSON(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeToken(dec, 0)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("chat: JSON value: %w", err)
	}
	if _, err := dec.Token(); err == nil {
		return jinja.Value{}, fmt.Errorf("chat: JSON value: trailing data")
	}
	return v, nil
}

// maxJSONDepth bounds the recursion of decodeToken on hostile input.
const maxJSONDepth = 10000

func decodeToken(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Value{}, fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	t, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch x := t.(type) {
	case json.Delim:
		if x == '{' {
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := decodeToken(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(kt.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
		var items []jinja.Value
		for dec.More() {
			v, err := decodeToken(dec, depth+1)
			if err != nil {
				return jinja.Value{}, err
			}
			items = append(items, v)
		}
		_, err := dec.Token()
		return jinja.NewList(items), err
	case json.Number:
		return numberValue(string(x)), nil
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", t)
}
