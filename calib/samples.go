package calib

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"sparkconv/infile"
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

// MaxSampleBytes is the largest sample accepted (1 MiB of text, about
// 250,000 tokens, cut into --seq-len chunks anyway). Tokenizing costs about
// 200 bytes of memory per byte of text, so one unbounded sample (a 50 MB
// line) could exhaust the machine; a longer sample is refused with its
// size, and reading it never holds more than this much of it.
const MaxSampleBytes = 1 << 20

// ReadSamples reads a samples file: JSON lines with a "text" field when the
// name ends in .jsonl, else text with samples separated by lines holding
// only "---". The file is streamed: a sample over MaxSampleBytes is refused
// without being held in memory. Only a regular file is read.
func ReadSamples(path string) ([]Text, error) {
	f, _, err := infile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return collect(func(visit func(Text) error) error {
		return readSamples(f, path, isJSONL(path), MaxSampleBytes, visit)
	})
}

// isJSONL reports whether a samples file is JSON lines (by its name).
func isJSONL(path string) bool { return strings.EqualFold(filepath.Ext(path), ".jsonl") }

// collect gathers the samples read hands to its visitor.
func collect(read func(visit func(Text) error) error) ([]Text, error) {
	var out []Text
	err := read(func(t Text) error { out = append(out, t); return nil })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ParseSamples splits the contents of a samples file named name. Text
// form: samples are separated by a line holding only "---" (a trailing
// "\r" and spaces around it are allowed); the newline before a separator
// and the file's final newline are not part of a sample; a separator at the
// very end closes the last sample. JSON-lines form: every non-blank line is
// an object whose "text" is a string. Every sample must be valid UTF-8,
// hold no NUL byte (binary input), hold more than white space and be at
// most MaxSampleBytes long.
func ParseSamples(data []byte, name string, jsonl bool) ([]Text, error) {
	return collect(func(visit func(Text) error) error {
		return readSamples(bytes.NewReader(data), name, jsonl, MaxSampleBytes, visit)
	})
}

// lineReader yields lines (with their newline) of at most max bytes kept;
// a longer line reports its full length but keeps only max bytes.
type lineReader struct {
	r   *bufio.Reader
	max int
}

func (lr *lineReader) next() (line []byte, n int64, err error) {
	for {
		piece, err := lr.r.ReadSlice('\n')
		n += int64(len(piece))
		if room := lr.max - len(line); room > 0 {
			line = append(line, piece[:min(len(piece), room)]...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && n > 0 {
			err = nil
		}
		return line, n, err
	}
}

// readSamples reads the samples of r (named name) and hands each to visit
// as it is read: only the sample being read is held.
func readSamples(r io.Reader, name string, jsonl bool, limit int, visit func(Text) error) error {
	lr := &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: limit + 2}
	if jsonl {
		lr.max = 2*limit + 64 // room for the JSON around the text and some escapes
		return parseJSONL(lr, name, limit, visit)
	}
	n := 0 // samples read
	var cur []byte
	var curLen int64
	startLine, line := 1, 1
	flush := func() error {
		t := Text{File: name, Index: n + 1, Line: startLine}
		t.Text = trimNewline(string(cur))
		if curLen > int64(limit)+2 || len(t.Text) > limit {
			return fmt.Errorf("%s is %s, longer than the %s a sample may be: cut it into several samples with lines holding only %q",
				t.where(), mib(max(curLen, int64(len(t.Text)))), mib(int64(limit)), Separator)
		}
		if err := check(t, cur); err != nil {
			return err
		}
		n++
		return visit(t)
	}
	for ; ; line++ {
		l, size, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: line %d: %w", name, line, err)
		}
		if size < 64 && strings.TrimSpace(string(l)) == Separator {
			if err := flush(); err != nil {
				return err
			}
			cur, curLen, startLine = cur[:0], 0, line+1
			continue
		}
		if room := limit + 2 - len(cur); room > 0 {
			cur = append(cur, l[:min(len(l), room)]...)
		}
		curLen += size
	}
	if n == 0 || curLen > int64(limit)+2 || strings.TrimSpace(string(cur)) != "" {
		return flush()
	}
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

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

func parseJSONL(lr *lineReader, name string, limit int, visit func(Text) error) error {
	count := 0
	for n := 1; ; n++ {
		raw, size, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: line %d: %w", name, n, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		t := Text{File: name, Index: count + 1, Line: n}
		if size > int64(lr.max) {
			return fmt.Errorf("%s is a %s line, longer than any sample of at most %s: split it into several lines",
				t.where(), mib(size), mib(int64(limit)))
		}
		if err := check(Text{File: name, Index: t.Index, Line: t.Line, Text: "x"}, raw); err != nil {
			return err
		}
		var rec struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("%s: invalid JSON: %w", t.where(), err)
		}
		if rec.Text == nil {
			return fmt.Errorf("%s: no string field \"text\"", t.where())
		}
		t.Text = *rec.Text
		if strings.TrimSpace(t.Text) == "" {
			return fmt.Errorf("%s is empty", t.where())
		}
		if len(t.Text) > limit {
			return fmt.Errorf("%s is %s, longer than the %s a sample may be: split it into several lines",
				t.where(), mib(int64(len(t.Text))), mib(int64(limit)))
		}
		count++
		if err := visit(t); err != nil {
			return err
		}
	}
	if count == 0 {
		return fmt.Errorf("%s: no samples", name)
	}
	return nil
}

// Chunk is a run of at most seq-len tokens of one sample; each chunk is its
// own sequence (positions from 0).
type Chunk struct {
	Sample int   // index into the selected texts
	Start  int   // offset of the first token in the sample's tokens
	IDs    []int //
}

// encode is one sample's tokens (with the tokenizer's special tokens); a
// sample that gives none, or an id outside the model's vocabulary, is
// refused by name.
func encode(tok *tokenizer.Tokenizer, t Text, vocab int) ([]int, error) {
	ids, err := tok.Encode(t.Text, true)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.where(), err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s gives no tokens", t.where())
	}
	for k, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("%s: token %d has id %d, outside the model's vocab_size %d (tokenizer.json does not fit the model)", t.where(), k, id, vocab)
		}
	}
	return ids, nil
}

// appendChunks cuts sample s's ids into chunks of at most seqLen tokens.
func appendChunks(chunks []Chunk, s int, ids []int, seqLen int) []Chunk {
	for a := 0; a < len(ids); a += seqLen {
		chunks = append(chunks, Chunk{Sample: s, Start: a, IDs: ids[a:min(a+seqLen, len(ids))]})
	}
	return chunks
}
