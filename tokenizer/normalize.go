package tokenizer

import (
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// cgj is U+034F COMBINING GRAPHEME JOINER, which x/text/norm inserts after
// 30 non-starters (Unicode's Stream-Safe Text Format, UAX #15). The Rust
// crate tokenizers normalizes with does not, so such segments (Zalgo text)
// are normalized here by the plain algorithm.
const cgj = "\u034f"

// normalizeForm applies f to s exactly as tokenizers does.
func normalizeForm(f norm.Form, s string) string {
	if f.IsNormalString(s) {
		return s
	}
	out := f.String(s)
	if strings.Count(out, cgj) == strings.Count(s, cgj) {
		return out
	}
	// Normalize segment by segment; only those holding a long run of
	// non-starters take the slow path.
	var sb strings.Builder
	start := 0
	flush := func(end int) {
		seg := s[start:end]
		o := f.String(seg)
		if strings.Count(o, cgj) != strings.Count(seg, cgj) {
			o = normalizeSlow(f, seg)
		}
		sb.WriteString(o)
		start = end
	}
	for i := 0; i < len(s); {
		p := f.PropertiesString(s[i:])
		n := p.Size()
		if n == 0 {
			n = 1
		}
		if i > start && p.BoundaryBefore() {
			flush(i)
		}
		i += n
	}
	flush(len(s))
	return sb.String()
}

func ccc(r rune) uint8 { return norm.NFD.PropertiesString(string(r)).CCC() }

// normalizeSlow is UAX #15 without the stream-safe limit: full
// decomposition, canonical ordering, and (for NFC/NFKC) canonical
// composition.
func normalizeSlow(f norm.Form, s string) string {
	decomp := norm.NFD
	if f == norm.NFKC || f == norm.NFKD {
		decomp = norm.NFKD
	}
	var rs []rune
	for _, r := range s {
		rs = append(rs, []rune(decomp.String(string(r)))...)
	}
	for i := 0; i < len(rs); {
		if ccc(rs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		run := rs[i:j]
		sort.SliceStable(run, func(a, b int) bool { return ccc(run[a]) < ccc(run[b]) })
		i = j
	}
	if f == norm.NFD || f == norm.NFKD {
		return string(rs)
	}
	out := make([]rune, 0, len(rs))
	starter := -1
	for _, c := range rs {
		cc := ccc(c)
		if starter >= 0 {
			last := len(out) - 1
			// Between the starter and c are only non-starters in canonical
			// order: c is blocked iff the last of them has a class >= c's.
			if last == starter || ccc(out[last]) < cc {
				if p, ok := composePair(out[starter], c); ok {
					out[starter] = p
					continue
				}
			}
		}
		if cc == 0 {
			starter = len(out)
		}
		out = append(out, c)
	}
	return string(out)
}

// composePair returns the primary composite of a and b, if there is one.
func composePair(a, b rune) (rune, bool) {
	s := norm.NFC.String(string(a) + string(b))
	r, n := utf8.DecodeRuneInString(s)
	if n > 0 && n == len(s) {
		return r, true
	}
	return 0, false
}
