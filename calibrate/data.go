package calibrate

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// Builtin names the calibration text shipped with lowbit.
const Builtin = "builtin"

// builtinJSONL is the built-in calibration set: short documents written for
// lowbit and released with it under its license (see data/PROVENANCE.md),
// one JSON object with a "text" field per line: prose, instructions, chat
// transcripts in the ChatML form Qwen3 uses, code and mathematics, in
// several languages.
//
//go:embed data/builtin.jsonl
var builtinJSONL []byte

// Documents are calibration texts; Packed says whether they are one
// running text to be cut into windows of the sequence length (a plain text
// file) or separate samples, each truncated to it (jsonl, builtin).
type Documents struct {
	Name   string // for the statistics' metadata: "builtin" or the file's base name
	Texts  []string
	Packed bool
}

// ReadDocuments reads a calibration source: Builtin, a .jsonl file (one
// JSON object per line with a "text" string; blank lines skipped) or any
// other file as plain UTF-8 text, split into paragraphs at blank lines.
func ReadDocuments(source string) (*Documents, error) {
	if source == Builtin {
		texts, err := ParseJSONL(bytes.NewReader(builtinJSONL))
		if err != nil {
			return nil, fmt.Errorf("calibrate: the built-in set: %w", err)
		}
		return &Documents{Name: Builtin, Texts: texts}, nil
	}
	f, err := os.Open(source)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w (--data takes %q or a .jsonl or text file)", err, Builtin)
	}
	defer f.Close()
	name := source
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	if strings.HasSuffix(strings.ToLower(source), ".jsonl") {
		texts, err := ParseJSONL(f)
		if err != nil {
			return nil, fmt.Errorf("calibrate: %s: %w", source, err)
		}
		return &Documents{Name: name, Texts: texts}, nil
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %s: %w", source, err)
	}
	texts, err := ParseText(b)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %s: %w", source, err)
	}
	return &Documents{Name: name, Texts: texts, Packed: true}, nil
}

// maxLine bounds one jsonl record, so that a file without newlines cannot
// exhaust memory.
const maxLine = 64 << 20

// ParseJSONL reads one JSON object per line, each with a "text" string, and
// returns the texts that are not empty. Blank lines are skipped; anything
// else that is not such an object is an error naming its line.
func ParseJSONL(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var texts []string
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("line %d: not a JSON object (%v); each line must be like {\"text\": \"...\"}", line, err)
		}
		raw, ok := rec["text"]
		if !ok {
			hint := ""
			if _, chat := rec["messages"]; chat {
				hint = ": render its \"messages\" with the model's chat template into a \"text\" field first"
			}
			return nil, fmt.Errorf("line %d: no \"text\" field%s", line, hint)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("line %d: \"text\" is not a string", line)
		}
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("line %d: \"text\" is not valid UTF-8", line)
		}
		if s != "" {
			texts = append(texts, s)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("a line is longer than %d MiB", maxLine>>20)
		}
		return nil, err
	}
	if len(texts) == 0 {
		return nil, errors.New("no texts: want one JSON object with a non-empty \"text\" per line")
	}
	return texts, nil
}

// ParseText splits UTF-8 text into paragraphs at blank lines; each keeps
// its trailing newline, so that packing them together restores the text's
// shape. Text that is not valid UTF-8 is an error.
func ParseText(b []byte) ([]string, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("not UTF-8 text (use a .jsonl file for JSON lines)")
	}
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	var texts []string
	for p := range strings.SplitSeq(s, "\n\n") {
		if strings.TrimSpace(p) != "" {
			texts = append(texts, strings.Trim(p, "\n")+"\n\n")
		}
	}
	if len(texts) == 0 {
		return nil, errors.New("no text")
	}
	return texts, nil
}

// Samples turns documents into at most n token sequences of at most seqLen
// tokens: separate documents are truncated to seqLen each; packed ones are
// concatenated and cut into consecutive windows of seqLen (the last may be
// shorter). encode is the model's tokenizer, without added special tokens
// (llm-compressor's add_special_tokens=False). Fewer than n samples come
// back when the documents run out.
func Samples(docs *Documents, encode func(string) []int, n, seqLen int) ([][]int, error) {
	if n < 1 || seqLen < 1 {
		return nil, fmt.Errorf("calibrate: %d samples of %d tokens: both must be at least 1", n, seqLen)
	}
	var out [][]int
	if !docs.Packed {
		for _, t := range docs.Texts {
			if len(out) == n {
				break
			}
			ids := encode(t)
			if len(ids) == 0 {
				continue
			}
			out = append(out, ids[:min(len(ids), seqLen)])
		}
	} else {
		var cur []int
		for _, t := range docs.Texts {
			if len(out) == n {
				break
			}
			for ids := encode(t); len(ids) > 0 && len(out) < n; {
				k := min(seqLen-len(cur), len(ids))
				cur = append(cur, ids[:k]...)
				ids = ids[k:]
				if len(cur) == seqLen {
					out = append(out, cur)
					cur = nil
				}
			}
		}
		if len(cur) > 0 && len(out) < n {
			out = append(out, cur)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("calibrate: %s: no tokens", docs.Name)
	}
	return out, nil
}
