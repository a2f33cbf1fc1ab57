package tokenizer

import (
	"unicode/utf8"
)

// utf8Status is what utf8Next found at a position.
type utf8Status uint8

const (
	utf8Valid      utf8Status = iota // a complete, valid sequence
	utf8Invalid                      // a maximal invalid subpart (to be replaced by one U+FFFD)
	utf8Incomplete                   // a valid prefix of a sequence cut off by the end of the input
)

// utf8Next classifies the sequence starting at b[0] following Unicode's
// "maximal subpart" practice (Table 3-7 of the Unicode standard), which is
// what Rust's String::from_utf8_lossy and Python's decode(errors="replace")
// implement: it returns the sequence's length n >= 1 and whether it is valid,
// an invalid maximal subpart, or an incomplete valid prefix at the end of b.
func utf8Next(b []byte) (int, utf8Status) {
	c := b[0]
	if c < 0x80 {
		return 1, utf8Valid
	}
	var need int
	lo, hi := byte(0x80), byte(0xBF) // allowed range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1, utf8Invalid
	}
	for k := 1; k <= need; k++ {
		if k >= len(b) {
			return k, utf8Incomplete
		}
		x := b[k]
		if x < lo || x > hi {
			return k, utf8Invalid
		}
		lo, hi = 0x80, 0xBF
	}
	return need + 1, utf8Valid
}

// appendLossy appends b to dst as valid UTF-8, replacing each maximal
// invalid subpart with U+FFFD. If final is false, an incomplete sequence at
// the end of b is not consumed: the returned n is the number of bytes of b
// consumed. If final is true, all of b is consumed (an incomplete tail
// becomes one U+FFFD, as in from_utf8_lossy).
func appendLossy(dst, b []byte, final bool) (out []byte, n int) {
	i := 0
	for i < len(b) {
		// Fast path over ASCII.
		if b[i] < 0x80 {
			j := i + 1
			for j < len(b) && b[j] < 0x80 {
				j++
			}
			dst = append(dst, b[i:j]...)
			i = j
			continue
		}
		size, st := utf8Next(b[i:])
		switch st {
		case utf8Valid:
			dst = append(dst, b[i:i+size]...)
		case utf8Invalid:
			dst = append(dst, "\uFFFD"...)
		case utf8Incomplete:
			if !final {
				return dst, i
			}
			dst = append(dst, "\uFFFD"...)
		}
		i += size
	}
	return dst, i
}

// lossyString returns b as a string, invalid UTF-8 replaced as
// String::from_utf8_lossy does.
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out, _ := appendLossy(make([]byte, 0, len(b)+8), b, true)
	return string(out)
}

// sanitizeUTF8 returns s unchanged when it is valid UTF-8, else s with each
// maximal invalid subpart replaced by U+FFFD.
func sanitizeUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return lossyString([]byte(s))
}
