package chat

import (
	"strings"

	"github.com/ardanlabs/jinja"
)

// The engine looks a filter up in its own closed table first and in the
// render's variables only when the table lacks the name, so a built-in
// filter cannot be replaced by passing a variable of its name. To install
// transformers' semantics for a filter the engine also has (tojson), Compile
// renames that filter's uses in the template text to a private name that
// the table lacks, and Render passes the replacement under that name.

// overriddenFilters maps a filter name to the variable that implements it.
var overriddenFilters = map[string]string{
	"tojson": "__lowbit_tojson",
}

// filterImpls are the replacements, by filter name.
var filterImpls = map[string]func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error){
	"tojson": tojson,
}

// renameFilters rewrites `| name` to `| private` inside {{ }} and {% %}
// tags, outside string literals and {% raw %} blocks. It scans tags the way
// the engine's scanner does (quotes hide closers; comments end at the first
// "#}"), so both agree on what is code. Text it cannot scan (an unclosed
// tag) is left as it is for the engine to report.
func renameFilters(src string) string {
	var out strings.Builder
	changed := false
	inRaw := false
	i := 0
	for i < len(src) {
		start := strings.Index(src[i:], "{")
		if start < 0 || i+start+1 >= len(src) {
			break
		}
		start += i
		var closer string
		switch src[start+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		default:
			out.WriteString(src[i : start+1])
			i = start + 1
			continue
		}
		out.WriteString(src[i:start])
		body := start + 2
		var end int // index just past the closer, or -1
		if closer == "#}" {
			end = strings.Index(src[body:], "#}")
			if end >= 0 {
				end += body + 2
			}
		} else {
			end = findCloser(src, body, closer)
		}
		if end < 0 {
			out.WriteString(src[start:])
			i = len(src)
			break
		}
		tag := src[start:end]
		if closer == "%}" {
			switch stmtKeyword(src[body : end-2]) {
			case "raw":
				inRaw = true
			case "endraw":
				inRaw = false
			}
		}
		if closer != "#}" && !inRaw {
			if t, ok := renameInTag(tag); ok {
				tag, changed = t, true
			}
		}
		out.WriteString(tag)
		i = end
	}
	if !changed {
		return src
	}
	out.WriteString(src[i:])
	return out.String()
}

// findCloser returns the index just past the first closer at or after i
// that is outside a quoted string, or -1.
func findCloser(src string, i int, closer string) int {
	for i < len(src) {
		c := src[i]
		if c == '\'' || c == '"' {
			i++
			for i < len(src) && src[i] != c {
				if src[i] == '\\' && i+1 < len(src) {
					i++
				}
				i++
			}
			i++
			continue
		}
		if c == closer[0] && i+1 < len(src) && src[i+1] == closer[1] {
			return i + 2
		}
		i++
	}
	return -1
}

// stmtKeyword is the first word of a statement tag's body.
func stmtKeyword(body string) string {
	body = strings.TrimLeft(body, "-+ \t\r\n")
	n := 0
	for n < len(body) && isIdentByte(body[n]) {
		n++
	}
	return body[:n]
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// renameInTag renames overridden filters after '|' in one tag's text.
func renameInTag(tag string) (string, bool) {
	if !strings.Contains(tag, "|") {
		return tag, false
	}
	var out strings.Builder
	changed := false
	last := 0
	for i := 2; i < len(tag); i++ {
		c := tag[i]
		if c == '\'' || c == '"' {
			i++
			for i < len(tag) && tag[i] != c {
				if tag[i] == '\\' && i+1 < len(tag) {
					i++
				}
				i++
			}
			continue
		}
		if c != '|' {
			continue
		}
		j := i + 1
		for j < len(tag) && (tag[j] == ' ' || tag[j] == '\t' || tag[j] == '\n' || tag[j] == '\r') {
			j++
		}
		k := j
		for k < len(tag) && isIdentByte(tag[k]) {
			k++
		}
		if private, ok := overriddenFilters[tag[j:k]]; ok {
			out.WriteString(tag[last:j])
			out.WriteString(private)
			last, changed = k, true
		}
		i = k - 1
	}
	if !changed {
		return tag, false
	}
	out.WriteString(tag[last:])
	return out.String(), true
}
