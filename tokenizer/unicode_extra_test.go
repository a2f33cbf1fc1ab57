package tokenizer

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"unicode"
	"unicode/utf8"
)

// baseClass is runeClass from Go's unicode tables alone, without overrides.
func baseClass(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return cNewline
	case unicode.IsSpace(r):
		return cSpace
	case unicode.IsLetter(r):
		return cLetter
	case unicode.IsNumber(r):
		return cNumber
	}
	return cOther
}

// TestGenerateClassOverrides rewrites unicode_extra.go from hf_unicode.json
// when LOWBIT_GEN_UNICODE=1, e.g. after regenerating the golden files with a
// tokenizers built on a newer Oniguruma:
//
//	LOWBIT_GEN_UNICODE=1 go test ./tokenizer -run TestGenerateClassOverrides
func TestGenerateClassOverrides(t *testing.T) {
	if os.Getenv("LOWBIT_GEN_UNICODE") != "1" {
		t.Skip("set LOWBIT_GEN_UNICODE=1 to regenerate unicode_extra.go")
	}
	u := readHFUnicode(t)
	want := make([]uint8, utf8.MaxRune+1)
	for _, x := range []struct {
		rs [][2]rune
		c  uint8
	}{{u.L, cLetter}, {u.N, cNumber}, {u.S, cSpace}} {
		for _, r := range x.rs {
			for c := r[0]; c <= r[1]; c++ {
				want[c] = x.c
			}
		}
	}
	want['\r'], want['\n'] = cNewline, cNewline
	names := map[uint8]string{cOther: "cOther", cLetter: "cLetter", cNumber: "cNumber", cSpace: "cSpace", cNewline: "cNewline"}
	var buf bytes.Buffer
	buf.WriteString(`package tokenizer

// classRange overrides the class of the code points lo..hi.
type classRange struct {
	lo, hi rune
	c      uint8
}

// classOverrides are the code points whose class under the Oniguruma engine
// built into tokenizers 0.23.2 (Unicode 16.0) differs from Go's unicode
// tables (Unicode 15.0): the letters and numbers assigned since. Generated
// from testdata/golden/tokenizer/hf_unicode.json (written by
// scripts/golden_tokenizer.py) by TestGenerateClassOverrides;
// TestHFCharClasses checks every code point.
var classOverrides = []classRange{
`)
	var lo, hi rune = -1, -1
	var c uint8
	flush := func() {
		if lo >= 0 {
			fmt.Fprintf(&buf, "\t{0x%04X, 0x%04X, %s},\n", lo, hi, names[c])
		}
		lo = -1
	}
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		if baseClass(r) == want[r] {
			flush()
			continue
		}
		if lo >= 0 && hi == r-1 && c == want[r] {
			hi = r
			continue
		}
		flush()
		lo, hi, c = r, r, want[r]
	}
	flush()
	buf.WriteString("}\n")
	if err := os.WriteFile("unicode_extra.go", buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
