package tokenizer

// splitBehavior is tokenizers' SplitDelimiterBehavior.
type splitBehavior uint8

const (
	bRemoved splitBehavior = iota
	bIsolated
	bMergedWithPrevious
	bMergedWithNext
	bContiguous
)

// splitStep is the Split pre-tokenizer (NormalizedString::split).
type splitStep struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

type seg struct {
	start, end int
	match      bool
}

// segments covers s with the matches of m and the gaps between them, as
// Pattern::find_matches.
func segments(m matcher, s string, invert bool) []seg {
	var out []seg
	prev := 0
	m.matches(s, func(start, end int) {
		if prev != start {
			out = append(out, seg{prev, start, invert})
		}
		out = append(out, seg{start, end, !invert})
		prev = end
	})
	if prev != len(s) {
		out = append(out, seg{prev, len(s), invert})
	}
	return out
}

func (st *splitStep) split(s string, emit func(string)) {
	if s == "" {
		return
	}
	segs := segments(st.m, s, st.invert)
	type keep struct {
		start, end int
		remove     bool
	}
	var ks []keep
	switch st.behavior {
	case bIsolated:
		for _, g := range segs {
			ks = append(ks, keep{g.start, g.end, false})
		}
	case bRemoved:
		for _, g := range segs {
			ks = append(ks, keep{g.start, g.end, g.match})
		}
	case bContiguous:
		prevMatch := false
		for _, g := range segs {
			if g.match == prevMatch && len(ks) > 0 {
				ks[len(ks)-1].end = g.end
			} else {
				ks = append(ks, keep{g.start, g.end, false})
			}
			prevMatch = g.match
		}
	case bMergedWithPrevious:
		prevMatch := false
		for _, g := range segs {
			if g.match && !prevMatch && len(ks) > 0 {
				ks[len(ks)-1].end = g.end
			} else {
				ks = append(ks, keep{g.start, g.end, false})
			}
			prevMatch = g.match
		}
	case bMergedWithNext:
		prevMatch := false
		for i := len(segs) - 1; i >= 0; i-- {
			g := segs[i]
			if g.match && !prevMatch && len(ks) > 0 {
				ks[len(ks)-1].start = g.start
			} else {
				ks = append(ks, keep{g.start, g.end, false})
			}
			prevMatch = g.match
		}
		for i, j := 0, len(ks)-1; i < j; i, j = i+1, j-1 {
			ks[i], ks[j] = ks[j], ks[i]
		}
	}
	for _, k := range ks {
		if !k.remove && k.end > k.start {
			emit(s[k.start:k.end])
		}
	}
}

// byteLevelStep is the splitting part of the ByteLevel pre-tokenizer:
// add_prefix_space and the GPT-2 regex. Its byte-to-character mapping is
// done by the model step (Tokenizer.byteLevel).
type byteLevelStep struct {
	addPrefixSpace bool
	re             matcher // nil when use_regex is false
}

func (st *byteLevelStep) split(s string, emit func(string)) {
	if st.addPrefixSpace && (s == "" || s[0] != ' ') {
		s = " " + s
	}
	if st.re == nil {
		emit(s)
		return
	}
	st.re.matches(s, func(start, end int) {
		if end > start {
			emit(s[start:end])
		}
	})
}
