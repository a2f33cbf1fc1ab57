package tokenizer

// StreamDecoder turns a stream of generated ids into text incrementally.
// The concatenation of everything Add and Flush return equals
// Decode(ids, skipSpecial) of all the ids. Add holds back an incomplete UTF-8
// sequence at the end (a character split across tokens) until the tokens
// that complete it arrive, as vLLM's incremental detokenizer does; bytes that
// can no longer become valid are emitted as U+FFFD at once. A StreamDecoder
// is not safe for concurrent use.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
	out         []byte
}

// NewStreamDecoder returns a decoder for one generated sequence.
func NewStreamDecoder(t *Tokenizer, skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add appends id and returns the text it completes (often "" while a
// multi-byte character is incomplete).
func (d *StreamDecoder) Add(id int) string {
	b, ok := d.t.tokenBytes(id, d.skipSpecial)
	if !ok {
		return ""
	}
	d.pending = append(d.pending, b...)
	out, n := appendLossy(d.out[:0], d.pending, false)
	d.out = out
	d.pending = d.pending[:copy(d.pending, d.pending[n:])]
	return string(out)
}

// Flush returns the held-back bytes (an incomplete sequence becomes U+FFFD)
// and resets the decoder.
func (d *StreamDecoder) Flush() string {
	out, _ := appendLossy(d.out[:0], d.pending, true)
	d.pending = d.pending[:0]
	return string(out)
}
