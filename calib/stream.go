package calib

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strings"

	"sparkconv/corpus"
	"sparkconv/infile"
	"sparkconv/tokenizer"
)

// The calibrating commands take from their samples only a token budget:
// the first tokens (rotate --smooth-down, qnn-bundle), chunks spread over
// the samples (keep-float), a share of every sample (GPTQ). The readers
// below apply the budget while reading: samples are streamed, checked and
// dropped, and only the tokens the budget can still use are kept, so
// memory follows the budget, never the size of the text.

// Builtin is a text built into sparkconv, read when no samples file is
// given.
type Builtin struct{ Text, Name string }

// The built-in texts: the calibration corpus and the held-out text
// (disjoint from it).
var (
	CalibText   = Builtin{corpus.Calib, corpus.CalibName}
	HeldOutText = Builtin{corpus.HeldOut, corpus.HeldOutName}
)

// Read is what reading the samples files found: their sources (the files,
// or the built-in text's name), the sha256 of their bytes concatenated in
// order, and how many samples they hold.
type Read struct {
	Sources []string
	SHA256  string
	Samples int
}

// EachSample reads the samples files in order (ReadSamples' formats; none:
// the built-in text def), streamed: each sample is checked and handed to
// visit, then dropped.
func EachSample(files []string, def Builtin, visit func(Text) error) (Read, error) {
	h := sha256.New()
	r := Read{Sources: files}
	count := func(t Text) error {
		r.Samples++
		return visit(t)
	}
	if len(files) == 0 {
		h.Write([]byte(def.Text))
		r.Sources = []string{def.Name}
		if err := readSamples(strings.NewReader(def.Text), def.Name, false, MaxSampleBytes, count); err != nil {
			return Read{}, err
		}
	}
	for _, path := range files {
		if err := eachInFile(path, h, count); err != nil {
			return Read{}, err
		}
	}
	r.SHA256 = hex.EncodeToString(h.Sum(nil))
	return r, nil
}

// eachInFile streams one samples file through visit, every byte of it
// into h.
func eachInFile(path string, h hash.Hash, visit func(Text) error) error {
	f, _, err := infile.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tee := io.TeeReader(f, h)
	if err := readSamples(tee, path, isJSONL(path), MaxSampleBytes, visit); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, tee); err != nil { // hash to the end
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// TokenizeEach reads the samples as EachSample does and encodes each
// (Tokenize's rules, sample by sample) for keep, which is given the
// sample's index and tokens and says whether later samples are still
// needed; once not, the rest is read and checked but not encoded. keep
// must copy what it keeps of ids only if it changes them.
func TokenizeEach(tok *tokenizer.Tokenizer, files []string, def Builtin, vocab int, keep func(i int, ids []int) (more bool, err error)) (Read, error) {
	more := true
	i := 0
	return EachSample(files, def, func(t Text) error {
		defer func() { i++ }()
		if !more {
			return nil
		}
		ids, err := encode(tok, t, vocab)
		if err != nil {
			return err
		}
		more, err = keep(i, ids)
		return err
	})
}

// PrefixChunks is the first n tokens of the samples (each sample encoded
// with the tokenizer's special tokens, cut into chunks of at most seqLen
// tokens, the last chunk cut short), read with TokenizeEach: the samples
// after the n-th token are checked, not encoded. It returns the chunks and
// their token count.
func PrefixChunks(tok *tokenizer.Tokenizer, files []string, def Builtin, n, seqLen, vocab int) ([]Chunk, int, Read, error) {
	var chunks []Chunk
	taken := 0
	r, err := TokenizeEach(tok, files, def, vocab, func(i int, ids []int) (bool, error) {
		ids = ids[:min(len(ids), n-taken)]
		chunks = appendChunks(chunks, i, ids, seqLen)
		taken += len(ids)
		return taken < n, nil
	})
	if err != nil {
		return nil, 0, Read{}, err
	}
	return chunks, taken, r, nil
}

// StreamPrefix is the samples' tokens concatenated in order, at most n
// of them (Stream's tokens, read with PrefixChunks).
func StreamPrefix(tok *tokenizer.Tokenizer, files []string, def Builtin, n, vocab int) ([]int, Read, error) {
	chunks, taken, r, err := PrefixChunks(tok, files, def, n, max(n, 1), vocab)
	if err != nil {
		return nil, Read{}, err
	}
	ids := make([]int, 0, taken)
	for _, c := range chunks {
		ids = append(ids, c.IDs...)
	}
	return ids, r, nil
}
