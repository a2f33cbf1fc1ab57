package tokenizer

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
	{0x1C89, 0x1C8A, cLetter},
	{0xA7CB, 0xA7CD, cLetter},
	{0xA7DA, 0xA7DC, cLetter},
	{0x105C0, 0x105F3, cLetter},
	{0x10D40, 0x10D49, cNumber},
	{0x10D4A, 0x10D65, cLetter},
	{0x10D6F, 0x10D85, cLetter},
	{0x10EC2, 0x10EC4, cLetter},
	{0x11380, 0x11389, cLetter},
	{0x1138B, 0x1138B, cLetter},
	{0x1138E, 0x1138E, cLetter},
	{0x11390, 0x113B5, cLetter},
	{0x113B7, 0x113B7, cLetter},
	{0x113D1, 0x113D1, cLetter},
	{0x113D3, 0x113D3, cLetter},
	{0x116D0, 0x116E3, cNumber},
	{0x11BC0, 0x11BE0, cLetter},
	{0x11BF0, 0x11BF9, cNumber},
	{0x13460, 0x143FA, cLetter},
	{0x16100, 0x1611D, cLetter},
	{0x16130, 0x16139, cNumber},
	{0x16D40, 0x16D6C, cLetter},
	{0x16D70, 0x16D79, cNumber},
	{0x18CFF, 0x18CFF, cLetter},
	{0x1CCF0, 0x1CCF9, cNumber},
	{0x1E5D0, 0x1E5ED, cLetter},
	{0x1E5F0, 0x1E5F0, cLetter},
	{0x1E5F1, 0x1E5FA, cNumber},
	{0x2EBF0, 0x2EE5D, cLetter},
}
