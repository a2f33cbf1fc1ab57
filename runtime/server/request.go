package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Request bodies are read the way vLLM's FastAPI app reads them: the body
// must be application/json, a JSON object; unknown fields are ignored;
// each known field is converted as pydantic's lax mode does ("5" is a fine
// integer, 2.0 too, 2.5 is not; "yes" is a boolean) and a value it cannot
// convert is a 400 naming the field.

// reqBody is a decoded request object.
type reqBody struct {
	m    map[string]any
	data []byte                     // the body as sent
	raw  map[string]json.RawMessage // its fields raw, decoded on demand
}

// rawField returns field k as sent, for values passed on with their key
// order (see rawjson.go).
func (b *reqBody) rawField(k string) (json.RawMessage, bool) {
	if b.raw == nil {
		b.raw = map[string]json.RawMessage{}
		json.Unmarshal(b.data, &b.raw)
	}
	v, ok := b.raw[k]
	return v, ok && !isNull(v)
}

// readBody reads and decodes r's body, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (*reqBody, *apiError) {
	ct := r.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	if ct == "" || strings.ToLower(mt) != "application/json" {
		// vLLM's validate_json_request dependency.
		return nil, &apiError{status: http.StatusBadRequest, typ: "Bad Request",
			msg: "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed", param: nil}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, typ: "Request Entity Too Large",
				msg: fmt.Sprintf("The request body is larger than the limit of %d bytes.", limit)}
		}
		return nil, plainBadRequest("Could not read the request body: " + err.Error())
	}
	return decodeBody(data)
}

// decodeBody parses data as a JSON object.
func decodeBody(data []byte) (*reqBody, *apiError) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, (&validationError{typ: "missing", loc: []any{"body"}, msg: "Field required", input: nil}).apiError()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	if err == nil {
		// Trailing data after the value is a decode error, as in Python.
		if _, err2 := dec.Token(); err2 != io.EOF {
			err = fmt.Errorf("Extra data")
		}
	}
	if err != nil {
		// Python reports the character offset of the error; Go the byte
		// offset, or nothing for a truncated document (its end).
		pos := len(data)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			pos = int(se.Offset)
		}
		pos = utf8.RuneCount(data[:min(max(pos, 0), len(data))])
		return nil, (&validationError{typ: "json_invalid", loc: []any{"body", pos}, msg: "JSON decode error",
			input: map[string]any{}, ctx: pyRepr(err.Error())}).apiError()
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, (&validationError{typ: "model_attributes_type", loc: []any{"body"},
			msg: "Input should be a valid dictionary or object to extract fields from", input: v}).apiError()
	}
	return &reqBody{m: m, data: data}, nil
}

// get returns the field's value, and whether it is present and not null.
func (b *reqBody) get(k string) (any, bool) {
	v, ok := b.m[k]
	return v, ok && v != nil
}

// truthy is Python's truthiness of a raw field, which vLLM's "before"
// validators test (data.get("stream") and so on).
func (b *reqBody) truthy(k string) bool {
	switch x := b.m[k].(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

func fieldErr(k, typ, msg string, input any) *apiError {
	return (&validationError{typ: typ, loc: []any{"body", k}, msg: msg, input: input}).apiError()
}

// toInt converts a value as pydantic's lax int does. Integers beyond int64
// saturate.
func toInt(v any) (int64, string, string) {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, "", ""
		} else if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange && !strings.ContainsAny(s, ".eE") {
			if strings.HasPrefix(s, "-") {
				return math.MinInt64, "", ""
			}
			return math.MaxInt64, "", ""
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
			return 0, "int_from_float", "Input should be a valid integer, got a number with a fractional part"
		}
		return saturate(f), "", ""
	case bool:
		if x {
			return 1, "", ""
		}
		return 0, "", ""
	case string:
		s := strings.TrimSpace(x)
		if i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64); err == nil && s != "" {
			return i, "", ""
		}
		return 0, "int_parsing", "Input should be a valid integer, unable to parse string as an integer"
	}
	return 0, "int_type", "Input should be a valid integer"
}

func saturate(f float64) int64 {
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

func toFloat(v any) (float64, string, string) {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, "float_parsing", "Input should be a valid number, unable to parse string as a number"
		}
		return f, "", ""
	case bool:
		if x {
			return 1, "", ""
		}
		return 0, "", ""
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, "float_parsing", "Input should be a valid number, unable to parse string as a number"
		}
		return f, "", ""
	}
	return 0, "float_type", "Input should be a valid number"
}

func toBool(v any) (bool, string, string) {
	const parse = "Input should be a valid boolean, unable to interpret input"
	switch x := v.(type) {
	case bool:
		return x, "", ""
	case json.Number:
		switch f, _ := x.Float64(); f {
		case 0:
			return false, "", ""
		case 1:
			return true, "", ""
		}
		return false, "bool_parsing", parse
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "0", "off", "f", "false", "n", "no":
			return false, "", ""
		case "1", "on", "t", "true", "y", "yes":
			return true, "", ""
		}
		return false, "bool_parsing", parse
	}
	return false, "bool_type", "Input should be a valid boolean"
}

// optInt reads an optional integer field (absent or null: nil).
func (b *reqBody) optInt(k string) (*int64, *apiError) {
	v, ok := b.get(k)
	if !ok {
		return nil, nil
	}
	i, typ, msg := toInt(v)
	if typ != "" {
		return nil, fieldErr(k, typ, msg, v)
	}
	return &i, nil
}

// intField reads an integer field that has a default and may not be null.
func (b *reqBody) intField(k string, def int64) (int64, *apiError) {
	v, present := b.m[k]
	if !present {
		return def, nil
	}
	if v == nil {
		return 0, fieldErr(k, "int_type", "Input should be a valid integer", nil)
	}
	i, typ, msg := toInt(v)
	if typ != "" {
		return 0, fieldErr(k, typ, msg, v)
	}
	return i, nil
}

func (b *reqBody) optFloat(k string) (*float64, *apiError) {
	v, ok := b.get(k)
	if !ok {
		return nil, nil
	}
	f, typ, msg := toFloat(v)
	if typ != "" {
		return nil, fieldErr(k, typ, msg, v)
	}
	return &f, nil
}

// boolField reads a boolean with a default; nullable fields (bool | None)
// take the default for null too.
func (b *reqBody) boolField(k string, def, nullable bool) (bool, *apiError) {
	v, present := b.m[k]
	if !present {
		return def, nil
	}
	if v == nil {
		if nullable {
			return def, nil
		}
		return false, fieldErr(k, "bool_type", "Input should be a valid boolean", nil)
	}
	x, typ, msg := toBool(v)
	if typ != "" {
		return false, fieldErr(k, typ, msg, v)
	}
	return x, nil
}

func (b *reqBody) optString(k string) (*string, *apiError) {
	v, ok := b.get(k)
	if !ok {
		return nil, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return nil, fieldErr(k, "string_type", "Input should be a valid string", v)
	}
	return &s, nil
}

// intList reads a list of integers (stop_token_ids, a tokenized prompt).
// minZero rejects negative entries as pydantic's Field(ge=0) does.
func intList(k string, v any, minZero bool) ([]int, *apiError) {
	list, ok := v.([]any)
	if !ok {
		return nil, fieldErr(k, "list_type", "Input should be a valid list", v)
	}
	out := make([]int, len(list))
	for i, e := range list {
		n, typ, msg := toInt(e)
		if typ != "" {
			return nil, (&validationError{typ: typ, loc: []any{"body", k, i}, msg: msg, input: e}).apiError()
		}
		if minZero && n < 0 {
			return nil, (&validationError{typ: "greater_than_equal", loc: []any{"body", k, i},
				msg: "Input should be greater than or equal to 0", input: e}).apiError()
		}
		if n > math.MaxInt32 || n < math.MinInt32 {
			// No vocabulary is this large; keep the value out of range
			// of every vocabulary without overflowing int on 32 bits.
			if n > 0 {
				n = math.MaxInt32
			} else {
				n = math.MinInt32
			}
		}
		out[i] = int(n)
	}
	return out, nil
}

// stopList reads stop: a string, a list of strings, or null.
func (b *reqBody) stopList() ([]string, *apiError) {
	v, ok := b.get("stop")
	if !ok {
		return nil, nil
	}
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, (&validationError{typ: "string_type", loc: []any{"body", "stop", i},
					msg: "Input should be a valid string", input: e}).apiError()
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fieldErr("stop", "string_type", "Input should be a valid string", v)
}

// plainJSON converts a decoded value for a chat template: json.Number
// becomes an int when it is written as an integer (Python's json gives
// int) and float64 otherwise; maps and lists are converted deeply.
func plainJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return int(i)
			}
		}
		f, _ := strconv.ParseFloat(s, 64)
		return f
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plainJSON(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plainJSON(e)
		}
		return out
	}
	return v
}
