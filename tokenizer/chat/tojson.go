package chat

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// tojson is transformers' tojson filter (chat_template_utils.py,
// _compile_jinja_template):
//
//	def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
//	    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
//	                      separators=separators, sort_keys=sort_keys)
//
// It differs from the engine's built-in tojson in what Python's json.dumps
// does and Go's encoders do not: floats in Python's repr ("1.0", "1e+16"),
// U+2028/U+2029 left raw, ensure_ascii, sort_keys, and indent's layout.
// Tool schemas reach the prompt through it, so every byte counts.
func tojson(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Value{}, fmt.Errorf("tojson: missing value")
	}
	// Python's parameter order after x, for positional use.
	params := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	if len(args)-1 > len(params) {
		return jinja.Value{}, fmt.Errorf("tojson: takes at most %d arguments", len(params))
	}
	opt := map[string]jinja.Value{}
	for i, a := range args[1:] {
		opt[params[i]] = a
	}
	for k, v := range kwargs {
		if !isParam(params, k) {
			return jinja.Value{}, fmt.Errorf("tojson: unexpected keyword argument %q", k)
		}
		if _, dup := opt[k]; dup {
			return jinja.Value{}, fmt.Errorf("tojson: got multiple values for argument %q", k)
		}
		opt[k] = v
	}
	e := jsonEncoder{itemSep: ", ", keySep: ": "}
	if v, ok := opt["ensure_ascii"]; ok {
		e.ascii = v.IsTruthy()
	}
	e.sortKeys = opt["sort_keys"].IsTruthy()
	if v, ok := opt["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			e.indent = strings.Repeat(" ", int(max(0, min(v.AsInt(), 1<<10))))
		case v.IsString():
			e.indent = v.AsString()
		default:
			return jinja.Value{}, fmt.Errorf("tojson: indent must be an int or a string")
		}
		e.indented = true
		e.itemSep = "," // json.dumps's default separators once indent is set
	}
	if v, ok := opt["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Value{}, fmt.Errorf("tojson: separators must be a pair of strings")
		}
		e.itemSep, e.keySep = v.AsList().Items[0].AsString(), v.AsList().Items[1].AsString()
	}
	if err := e.encode(args[0], 0); err != nil {
		return jinja.Value{}, err
	}
	return jinja.NewString(e.b.String()), nil
}

func isParam(params []string, k string) bool {
	for _, p := range params {
		if p == k {
			return true
		}
	}
	return false
}

type jsonEncoder struct {
	b               strings.Builder
	ascii, sortKeys bool
	indented        bool
	indent          string
	itemSep, keySep string
}

// maxEncodeDepth stands in for Python's recursion limit (a self-containing
// list made with list.append would otherwise recurse forever).
const maxEncodeDepth = 1000

func (e *jsonEncoder) newline(level int) {
	if e.indented {
		e.b.WriteByte('\n')
		for range level {
			e.b.WriteString(e.indent)
		}
	}
}

func (e *jsonEncoder) encode(v jinja.Value, level int) error {
	if level > maxEncodeDepth {
		return fmt.Errorf("tojson: maximum recursion depth exceeded")
	}
	switch {
	case v.IsNone():
		e.b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			e.b.WriteString("true")
		} else {
			e.b.WriteString("false")
		}
	case v.IsInt():
		e.b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		e.b.WriteString(jsonFloat(v.AsFloat()))
	case v.IsString():
		e.str(v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			e.b.WriteString("[]")
			return nil
		}
		e.b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				e.b.WriteString(e.itemSep)
			}
			e.newline(level + 1)
			if err := e.encode(it, level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			e.b.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if e.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		e.b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				e.b.WriteString(e.itemSep)
			}
			e.newline(level + 1)
			e.str(k)
			e.b.WriteString(e.keySep)
			if err := e.encode(d.Data[k], level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.b.WriteByte('}')
	case v.IsUndefined():
		return fmt.Errorf("tojson: Object of type Undefined is not JSON serializable")
	default:
		return fmt.Errorf("tojson: Object of type %s is not JSON serializable", v.String())
	}
	return nil
}

// str writes s as json.dumps does: the short escapes for the usual control
// characters, \u00XX for the others, and everything else raw unless
// ensure_ascii asks for \uXXXX (with surrogate pairs above the BMP).
func (e *jsonEncoder) str(s string) {
	b := &e.b
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if c < 0x20 || (c == 0x7f && e.ascii) {
					fmt.Fprintf(b, `\u%04x`, c)
				} else {
					b.WriteByte(c)
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case !e.ascii:
			// Raw, bytes as given: an invalid byte stays what it was, as
			// the tokenizer downstream sees the same bytes.
			b.WriteString(s[i : i+size])
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			r -= 0x10000
			fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		}
		i += size
	}
	b.WriteByte('"')
}

// jsonFloat is Python's float repr, which json.dumps uses: the shortest
// digits that round-trip, in positional notation with at least one
// fractional digit while the decimal exponent is in [-5, 16), scientific
// ("1e+16", "1.5e-07") outside it. Non-finite values print as json.dumps
// prints them (allow_nan is on by default).
func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pyFloatRepr(f)
}

func pyFloatRepr(f float64) string {
	sci := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX, shortest digits
	exp, _ := strconv.Atoi(sci[strings.LastIndexByte(sci, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return sci
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}
