package calib

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"sparkconv/tokenizer"
)

// Text is one calibration sample as read from a samples file.
type Text struct {
	File  string `json:"file"`
	Index int    `json:"index"` // 1-based position among the file's samples
	Line  int    `json:"line"`  // 1-based line where the sample starts
	Text  string `json:"-"`
}

// where names a sample in messages: "corpus.txt: sample 3 (line 41)".
func (t Text) where() string {
	return fmt.Sprintf("%s: sample %d (line %d)", t.File, t.Index, t.Line)
}

// Separator is the line that separates samples in a text file.
const Separator = "---"

// ReadSamples reads a samples file: JSON lines with a "text" field when the
// name ends in .jsonl, else text with samples separated by lines holding
// only "---".
func ReadSamples(path string) ([]Text, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseSamples(data, path, strings.EqualFold(filepath.Ext(path), ".jsonl"))
}

// ParseSamples splits the contents of a samples file named name. Text
// form: samples are separated by a line holding only "---" (a trailing
// "\r" and spaces around it are allowed); the newline before a separator
// and the file's final newline are not part of a sample; a separator at the
// very end closes the last sample. JSON-lines form: every non-blank line is
// an object whose "text" is a string. Every sample must be valid UTF-8,
// hold no NUL byte (binary input) and hold more than white space.
func ParseSamples(data []byte, name string, jsonl bool) ([]Text, error) {
	if jsonl {
		return parseJSONL(data, name)
	}
	var out []Text
	start, startLine, line := 0, 1, 1
	flush := func(end int) error {
		t := Text{File: name, Index: len(out) + 1, Line: startLine, Text: trimNewline(string(data[start:end]))}
		if err := check(t, data[start:end]); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	}
	for pos := 0; pos < len(data); line++ {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data)
		if end >= 0 {
			next = pos + end + 1
		}
		if strings.TrimSpace(string(data[pos:next])) == Separator {
			if err := flush(pos); err != nil {
				return nil, err
			}
			start, startLine = next, line+1
		}
		pos = next
	}
	if len(out) == 0 || strings.TrimSpace(string(data[start:])) != "" {
		if err := flush(len(data)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func trimNewline(s string) string {
	s = strings.TrimSuffix(s, "\n")
	return strings.TrimSuffix(s, "\r")
}

// check refuses binary, non-UTF-8 and empty samples, naming them.
func check(t Text, raw []byte) error {
	if i := bytes.IndexByte(raw, 0); i >= 0 {
		return fmt.Errorf("%s holds a NUL byte (byte %d of the sample): binary input, not text", t.where(), i)
	}
	if !utf8.Valid(raw) {
		return fmt.Errorf("%s is not valid UTF-8 (first bad byte at offset %d of the sample)", t.where(), firstInvalid(raw))
	}
	if strings.TrimSpace(t.Text) == "" {
		return fmt.Errorf("%s is empty", t.where())
	}
	return nil
}

func firstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

func parseJSONL(data []byte, name string) ([]Text, error) {
	var out []Text
	for n, raw := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		t := Text{File: name, Index: len(out) + 1, Line: n + 1}
		if err := check(Text{File: name, Index: t.Index, Line: t.Line, Text: "x"}, raw); err != nil {
			return nil, err
		}
		var rec struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("%s: invalid JSON: %w", t.where(), err)
		}
		if rec.Text == nil {
			return nil, fmt.Errorf("%s: no string field \"text\"", t.where())
		}
		t.Text = *rec.Text
		if strings.TrimSpace(t.Text) == "" {
			return nil, fmt.Errorf("%s is empty", t.where())
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no samples", name)
	}
	return out, nil
}

// Select keeps at most max samples (0 = all): a random subset drawn with
// seed when there are more, in their original order.
func Select(texts []Text, max int, seed uint64) []Text {
	if max <= 0 || max >= len(texts) {
		return texts
	}
	perm := rand.New(rand.NewPCG(seed, 0x63616c6962)).Perm(len(texts))[:max]
	sort.Ints(perm)
	out := make([]Text, max)
	for k, i := range perm {
		out[k] = texts[i]
	}
	return out
}

// Chunk is a run of at most seq-len tokens of one sample; each chunk is its
// own sequence (positions from 0).
type Chunk struct {
	Sample int   // index into the selected texts
	Start  int   // offset of the first token in the sample's tokens
	IDs    []int //
}

// Tokenize encodes every sample (with the tokenizer's special tokens, as
// transformers' tokenizer(text) does) and cuts each into chunks of at most
// seqLen tokens, keeping every token. It fails on a sample that gives no
// tokens or an id outside the model's vocabulary, naming the sample.
func Tokenize(tok *tokenizer.Tokenizer, texts []Text, seqLen, vocab int) ([]Chunk, []int, error) {
	if seqLen < 1 {
		return nil, nil, fmt.Errorf("sequence length %d, must be >= 1", seqLen)
	}
	var chunks []Chunk
	counts := make([]int, len(texts))
	for s, t := range texts {
		ids, err := tok.Encode(t.Text, true)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", t.where(), err)
		}
		if len(ids) == 0 {
			return nil, nil, fmt.Errorf("%s gives no tokens", t.where())
		}
		for k, id := range ids {
			if id < 0 || id >= vocab {
				return nil, nil, fmt.Errorf("%s: token %d has id %d, outside the model's vocab_size %d (tokenizer.json does not fit the model)", t.where(), k, id, vocab)
			}
		}
		counts[s] = len(ids)
		for a := 0; a < len(ids); a += seqLen {
			chunks = append(chunks, Chunk{Sample: s, Start: a, IDs: ids[a:min(a+seqLen, len(ids))]})
		}
	}
	return chunks, counts, nil
}
