package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jscan is a minimal JSON reader for the two large members of a BPE model,
// vocab and merges, which encoding/json decodes several times slower (they
// are 151k entries each for Qwen3). The input has already been checked to be
// valid JSON by encoding/json.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) errf(format string, a ...any) error {
	return fmt.Errorf("offset %d: %s", s.i, fmt.Sprintf(format, a...))
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte (0 at the end).
func (s *jscan) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *jscan) expect(c byte) error {
	if s.peek() != c {
		return s.errf("want %q", c)
	}
	s.i++
	return nil
}

// str reads a JSON string.
func (s *jscan) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			raw := s.b[start:s.i]
			s.i++
			if !utf8.Valid(raw) {
				return "", s.errf("invalid UTF-8 in string")
			}
			return string(raw), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", s.errf("control character in string")
		}
		s.i++
	}
	// Slow path: escapes.
	buf := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !utf8.Valid(buf) {
				return "", s.errf("invalid UTF-8 in string")
			}
			return string(buf), nil
		case c < 0x20:
			return "", s.errf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := s.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xDC00 || s.i+6 > len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
					return "", s.errf("lone surrogate in \\u escape")
				}
				s.i += 2
				r2, err := s.hex4()
				if err != nil {
					return "", err
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", s.errf("bad surrogate pair in \\u escape")
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", s.errf("bad escape \\%c", e)
		}
	}
	return "", errors.New("unterminated string")
}

func (s *jscan) hex4() (rune, error) {
	if s.i+4 > len(s.b) {
		return 0, s.errf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, s.errf("bad \\u escape")
	}
	s.i += 4
	return rune(v), nil
}

// int reads a non-negative integer that fits an int32.
func (s *jscan) int32() (int32, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 32)
	if err != nil || s.i == start {
		return 0, s.errf("want a non-negative int32 id")
	}
	return int32(v), nil
}

// parseVocab reads {"token": id, ...}; a repeated token keeps its last id,
// as serde's map does.
func parseVocab(raw []byte) (map[string]int32, error) {
	s := &jscan{b: raw}
	if err := s.expect('{'); err != nil {
		return nil, fmt.Errorf("vocab: %v", err)
	}
	m := make(map[string]int32, len(raw)/16)
	if s.peek() == '}' {
		return m, nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return nil, fmt.Errorf("vocab: %v", err)
		}
		if err := s.expect(':'); err != nil {
			return nil, fmt.Errorf("vocab: %v", err)
		}
		v, err := s.int32()
		if err != nil {
			return nil, fmt.Errorf("vocab: token %q: %v", k, err)
		}
		m[k] = v
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			return m, nil
		default:
			return nil, fmt.Errorf("vocab: %v", s.errf("want ',' or '}'"))
		}
	}
}

// parseMerges reads the merges: all [a, b] pairs, or all legacy "a b"
// strings (lines starting with #version are skipped).
func parseMerges(raw []byte) ([][2]string, error) {
	s := &jscan{b: raw}
	if err := s.expect('['); err != nil {
		return nil, fmt.Errorf("merges: %v", err)
	}
	out := make([][2]string, 0, len(raw)/12)
	if s.peek() == ']' {
		return out, nil
	}
	legacy := s.peek() == '"'
	for {
		if legacy {
			l, err := s.str()
			if err != nil {
				return nil, fmt.Errorf("merges: %v", err)
			}
			if len(l) < 8 || l[:8] != "#version" {
				sp, n := -1, 0
				for i := 0; i < len(l); i++ {
					if l[i] == ' ' {
						if n == 0 {
							sp = i
						}
						n++
					}
				}
				if n != 1 {
					return nil, fmt.Errorf("merges: line %d %q is not two tokens separated by one space", len(out)+1, l)
				}
				out = append(out, [2]string{l[:sp], l[sp+1:]})
			}
		} else {
			if s.peek() != '[' {
				return nil, fmt.Errorf("merges: entry %d: pairs and \"a b\" strings are mixed", len(out))
			}
			s.i++
			a, err := s.str()
			if err != nil {
				return nil, fmt.Errorf("merges: entry %d: %v", len(out), err)
			}
			if err := s.expect(','); err != nil {
				return nil, fmt.Errorf("merges: entry %d: a pair needs 2 tokens: %v", len(out), err)
			}
			b, err := s.str()
			if err != nil {
				return nil, fmt.Errorf("merges: entry %d: %v", len(out), err)
			}
			if err := s.expect(']'); err != nil {
				return nil, fmt.Errorf("merges: entry %d: a pair needs 2 tokens: %v", len(out), err)
			}
			out = append(out, [2]string{a, b})
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			return out, nil
		default:
			return nil, fmt.Errorf("merges: %v", s.errf("want ',' or ']'"))
		}
	}
}

// skip skips one JSON value.
func (s *jscan) skip(depth int) error {
	if depth > 1000 {
		return s.errf("nesting too deep")
	}
	switch c := s.peek(); {
	case c == '"':
		_, err := s.str()
		return err
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.i++
		if s.peek() == end {
			s.i++
			return nil
		}
		for {
			if c == '{' {
				if _, err := s.str(); err != nil {
					return err
				}
				if err := s.expect(':'); err != nil {
					return err
				}
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case end:
				s.i++
				return nil
			default:
				return s.errf("want ',' or %q", end)
			}
		}
	case c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n':
		start := s.i
		for s.i < len(s.b) && (s.b[s.i] == '-' || s.b[s.i] == '+' || s.b[s.i] == '.' ||
			(s.b[s.i] >= '0' && s.b[s.i] <= '9') || (s.b[s.i] >= 'a' && s.b[s.i] <= 'z') || s.b[s.i] == 'E') {
			s.i++
		}
		lit := string(s.b[start:s.i])
		if c >= 'a' && lit != "true" && lit != "false" && lit != "null" {
			return s.errf("bad literal %q", lit)
		}
		return nil
	default:
		return s.errf("want a JSON value")
	}
}

// members splits a JSON object into its members' raw values.
func members(raw []byte) (map[string][]byte, error) {
	s := &jscan{b: raw}
	if err := s.expect('{'); err != nil {
		return nil, err
	}
	m := map[string][]byte{}
	if s.peek() == '}' {
		s.i++
	} else {
		for {
			k, err := s.str()
			if err != nil {
				return nil, err
			}
			if err := s.expect(':'); err != nil {
				return nil, err
			}
			s.ws()
			start := s.i
			if err := s.skip(0); err != nil {
				return nil, err
			}
			m[k] = raw[start:s.i]
			c := s.peek()
			s.i++
			if c == '}' {
				break
			}
			if c != ',' {
				s.i--
				return nil, s.errf("want ',' or '}'")
			}
		}
	}
	if s.peek() != 0 {
		return nil, s.errf("data after the top-level value")
	}
	return m, nil
}
