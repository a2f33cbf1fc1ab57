package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Character classes of the pre-tokenizer patterns. \s is Unicode White_Space
// (Oniguruma's Unicode \s), \p{L} and \p{N} the general categories.
const (
	cOther   uint8 = iota // none of the below: [^\s\p{L}\p{N}]
	cLetter               // \p{L}
	cNumber               // \p{N}
	cSpace                // \s other than \r and \n
	cNewline              // \r or \n
)

// classTabSize covers the BMP and planes 1-3 (CJK extensions up to H and J);
// runes above are classified with the unicode package directly.
const classTabSize = 0x40000

var (
	classOnce sync.Once
	classTab  []uint8
)

func buildClassTab() {
	t := make([]uint8, classTabSize)
	fill := func(rt *unicode.RangeTable, c uint8) {
		for _, r := range rt.R16 {
			for x := uint32(r.Lo); x <= uint32(r.Hi); x += uint32(r.Stride) {
				t[x] = c
			}
		}
		for _, r := range rt.R32 {
			for x := r.Lo; x <= r.Hi && x < classTabSize; x += r.Stride {
				t[x] = c
			}
		}
	}
	fill(unicode.L, cLetter)
	fill(unicode.N, cNumber)
	fill(unicode.White_Space, cSpace)
	t['\r'], t['\n'] = cNewline, cNewline
	for _, o := range classOverrides {
		for x := o.lo; x <= o.hi && x < classTabSize; x++ {
			t[x] = o.c
		}
	}
	classTab = t
}

// runeClass is the class of r; classTab must have been built.
func runeClass(r rune) uint8 {
	if r >= 0 && r < classTabSize {
		return classTab[r]
	}
	for _, o := range classOverrides {
		if r >= o.lo && r <= o.hi {
			return o.c
		}
	}
	switch {
	case unicode.IsSpace(r):
		return cSpace
	case unicode.IsLetter(r):
		return cLetter
	case unicode.IsNumber(r):
		return cNumber
	}
	return cOther
}

var asciiClass = func() (t [128]uint8) {
	for c := 0; c < 128; c++ {
		switch {
		case c == '\r' || c == '\n':
			t[c] = cNewline
		case c == ' ' || (c >= '\t' && c <= '\r'):
			t[c] = cSpace
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			t[c] = cLetter
		case c >= '0' && c <= '9':
			t[c] = cNumber
		}
	}
	return t
}()

// classAt returns the class and byte length of the rune at s[i] (s valid UTF-8).
func classAt(s string, i int) (uint8, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return runeClass(r), n
}

// spanClass returns the end of the run of class c starting at s[i].
func spanClass(s string, i int, c uint8) int {
	for i < len(s) {
		b := s[i]
		if b < utf8.RuneSelf {
			if asciiClass[b] != c {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if runeClass(r) != c {
			return i
		}
		i += n
	}
	return i
}

// foldASCII returns the ASCII lower-case letter that the rune at s[i] matches
// case-insensitively (Unicode simple case folding, as Oniguruma's and Rust
// regex's (?i)) among the letters the contraction alternatives use, or 0.
func foldASCII(s string, i int, fold bool) (byte, int) {
	if i >= len(s) {
		return 0, 0
	}
	b := s[i]
	if b < utf8.RuneSelf {
		if fold && b >= 'A' && b <= 'Z' {
			b += 'a' - 'A'
		}
		return b, 1
	}
	if fold && strings.HasPrefix(s[i:], "\u017F") { // ſ LATIN SMALL LETTER LONG S folds to s
		return 's', 2
	}
	return 0, 0
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at s[i] (s[i] == '\”),
// case-insensitively if fold; it returns the end of the match or -1.
func contraction(s string, i int, fold bool) int {
	j := i + 1
	c1, n1 := foldASCII(s, j, fold)
	switch c1 {
	case 's', 't', 'm', 'd':
		return j + n1
	case 'r', 'v', 'l':
		want := byte('e')
		if c1 == 'l' {
			want = 'l'
		}
		if c2, n2 := foldASCII(s, j+n1, fold); c2 == want {
			return j + n1 + n2
		}
	}
	return -1
}

// Built-in split patterns, recognised by their exact text in tokenizer.json.
const (
	// Qwen2, Qwen2.5, Qwen3.
	patQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama 3: the same with \p{N}{1,3}.
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// GPT-2, used by the ByteLevel pre-tokenizer when use_regex is true.
	patGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// scanQwen returns the end of the match at s[i] (i < len(s)) of patQwen2
// (maxDigits 1) or patLlama3 (maxDigits 3), with the semantics of a
// backtracking engine (Oniguruma, fancy-regex): the first alternative that
// matches wins, quantifiers are greedy. Every position matches some
// alternative, so the matches tile the string.
func scanQwen(s string, i int, maxDigits int) int {
	b := s[i]
	c0, n0 := classAt(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if b == '\'' {
		if e := contraction(s, i, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+ : a letter run, optionally preceded by one
	// character that is neither CR, LF, a letter nor a number.
	if c0 == cLetter {
		return spanClass(s, i+n0, cLetter)
	}
	if (c0 == cSpace || c0 == cOther) && i+n0 < len(s) {
		if c1, n1 := classAt(s, i+n0); c1 == cLetter {
			return spanClass(s, i+n0+n1, cLetter)
		}
	}
	// \p{N} or \p{N}{1,3}
	if c0 == cNumber {
		e := i + n0
		for k := 1; k < maxDigits && e < len(s); k++ {
			c, n := classAt(s, e)
			if c != cNumber {
				break
			}
			e += n
		}
		return e
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if b == ' ' {
		j = i + 1
	}
	if j < len(s) {
		if c, n := classAt(s, j); c == cOther {
			e := spanClass(s, j+n, cOther)
			for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
				e++
			}
			return e
		}
	}
	// Now s[i] is whitespace. Scan the whole run.
	e, lastNL, last := i, -1, i
	for e < len(s) {
		c, n := classAt(s, e)
		if c == cNewline {
			lastNL = e
		} else if c != cSpace {
			break
		}
		last = e
		e += n
	}
	// \s*[\r\n]+ : \s* backtracks from the end of the run to its last CR/LF.
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S) : the whole run at the end of the string, else the run less
	// its last character (which then starts the next match), if that leaves
	// at least one.
	if e == len(s) {
		return e
	}
	if last > i {
		return last
	}
	// \s+
	return e
}

// scanGPT2 is scanQwen for patGPT2.
func scanGPT2(s string, i int) int {
	b := s[i]
	if b == '\'' {
		if e := contraction(s, i, false); e > 0 {
			return e
		}
	}
	// ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`
	j := i
	if b == ' ' {
		j = i + 1
	}
	if j < len(s) {
		if c, n := classAt(s, j); c == cLetter || c == cNumber || c == cOther {
			return spanClass(s, j+n, c)
		}
	}
	// `\s+(?!\S)|\s+`
	e, last := i, i
	for e < len(s) {
		c, n := classAt(s, e)
		if c != cSpace && c != cNewline {
			break
		}
		last = e
		e += n
	}
	if e == len(s) {
		return e
	}
	if last > i {
		return last
	}
	return e
}

// matcher finds the non-overlapping matches of a split pattern, left to
// right, as onig's find_iter.
type matcher interface {
	matches(s string, fn func(start, end int))
}

type scanMatcher struct{ scan func(s string, i int) int }

func (m scanMatcher) matches(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		e := m.scan(s, i)
		fn(i, e)
		i = e
	}
}

type regexpMatcher struct{ re *regexp.Regexp }

func (m regexpMatcher) matches(s string, fn func(start, end int)) {
	for _, loc := range m.re.FindAllStringIndex(s, -1) {
		fn(loc[0], loc[1])
	}
}

// newMatcher returns the matcher of a Split pattern: a built-in scanner for
// the known patterns, else Go's regexp after translating Oniguruma's Unicode
// classes; an error for patterns RE2 cannot express.
func newMatcher(pattern string, literal bool) (matcher, error) {
	if literal {
		if pattern == "" {
			return nil, fmt.Errorf("empty Split string pattern")
		}
		return regexpMatcher{regexp.MustCompile(regexp.QuoteMeta(pattern))}, nil
	}
	switch pattern {
	case patQwen2:
		return scanMatcher{func(s string, i int) int { return scanQwen(s, i, 1) }}, nil
	case patLlama3:
		return scanMatcher{func(s string, i int) int { return scanQwen(s, i, 3) }}, nil
	case patGPT2:
		return scanMatcher{scanGPT2}, nil
	}
	tr, err := translateOnig(pattern)
	if err != nil {
		return nil, fmt.Errorf("Split regex %q: %v", pattern, err)
	}
	re, err := regexp.Compile(tr)
	if err != nil {
		return nil, fmt.Errorf("Split regex %q cannot be expressed with Go's regexp (RE2): %v", pattern, err)
	}
	return regexpMatcher{re}, nil
}

// Oniguruma's Unicode meaning of the Perl classes, in RE2 syntax. Go's \s,
// \d and \w are ASCII-only. \s is White_Space: U+0009-000D, U+0085 and the
// separators (Zs, Zl, Zp). \w approximates Oniguruma's word characters
// (Alphabetic, marks, numbers, connector punctuation).
const (
	onigSpace = `\t-\r\x{85}\p{Z}`
	onigDigit = `\p{Nd}`
	onigWord  = `\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE}`
)

// translateOnig rewrites \s \S \d \D \w \W and the line anchors ^ $ of an
// Oniguruma (Ruby syntax) pattern into RE2 syntax with the same Unicode
// meaning. Constructs it cannot rewrite exactly are errors.
func translateOnig(p string) (string, error) {
	var sb strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			e := p[i+1]
			i++
			switch e {
			case 's', 'd', 'w':
				set := map[byte]string{'s': onigSpace, 'd': onigDigit, 'w': onigWord}[e]
				if inClass {
					sb.WriteString(set)
				} else {
					sb.WriteString("[" + set + "]")
				}
			case 'S', 'D', 'W':
				if inClass {
					return "", fmt.Errorf("\\%c inside a character class is not supported", e)
				}
				set := map[byte]string{'S': onigSpace, 'D': onigDigit, 'W': onigWord}[e]
				sb.WriteString("[^" + set + "]")
			case 'b', 'B', 'h', 'H', 'G', 'K', 'R', 'X', 'k', 'g':
				return "", fmt.Errorf("\\%c has no RE2 equivalent", e)
			default:
				sb.WriteByte('\\')
				sb.WriteByte(e)
			}
		case c == '[' && !inClass:
			inClass = true
			sb.WriteByte(c)
			// A ']' or '^]' right after '[' is literal.
			if i+1 < len(p) && p[i+1] == '^' {
				sb.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				sb.WriteString(`\]`)
				i++
			}
		case c == '[' && inClass:
			return "", fmt.Errorf("nested character classes and POSIX brackets are not supported")
		case c == ']' && inClass:
			inClass = false
			sb.WriteByte(c)
		case c == '^' && !inClass:
			sb.WriteString(`(?m:^)`)
		case c == '$' && !inClass:
			sb.WriteString(`(?m:$)`)
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String(), nil
}
