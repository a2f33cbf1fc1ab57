package tokenizer

import (
	"math/rand"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// Without long runs of non-starters, the slow path equals x/text/norm.
func TestNormalizeSlowAgrees(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	atoms := []string{"a", "e", "o", "u", "A", "\u0301", "\u0300", "\u0302", "\u0323", "\u0308", "\u031b", "\u0345",
		"\u1100", "\u1161", "\u11a8", "가", "\u0915", "\u093c", "\u0344", "\u212b", "Å", "ﬁ", "①", "\u0f73", "\u0f71", "\u0f72", "é", "ạ", "x"}
	for _, f := range []norm.Form{norm.NFC, norm.NFD, norm.NFKC, norm.NFKD} {
		for n := 0; n < 3000; n++ {
			var sb strings.Builder
			for k := rng.Intn(12); k >= 0; k-- {
				sb.WriteString(atoms[rng.Intn(len(atoms))])
			}
			s := sb.String()
			if got, want := normalizeSlow(f, s), f.String(s); got != want {
				t.Fatalf("form %v: slow(%+q) = %+q, norm = %+q", f, s, got, want)
			}
		}
	}
}

// Long runs of combining marks (Zalgo text) are normalized without the
// stream-safe U+034F that x/text/norm inserts after 30 non-starters.
func TestNormalizeLongRuns(t *testing.T) {
	s := "a" + strings.Repeat("\u0301\u0323", 40) + " e" + strings.Repeat("\u0308", 35) + "x"
	got := normalizeForm(norm.NFC, s)
	// As Python's unicodedata.normalize("NFC", s): marks sorted by class, the
	// first of each class composed where a composite exists.
	want := "\u1ea1" + strings.Repeat("\u0323", 39) + strings.Repeat("\u0301", 40) + " \u00eb" + strings.Repeat("\u0308", 34) + "x"
	if got != want {
		t.Errorf("NFC = %+q\nwant %+q", got, want)
	}
	if strings.Contains(got, cgj) {
		t.Error("CGJ inserted")
	}
}
