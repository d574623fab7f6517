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

// The calibrating commands take from their samples only what their Rule
// keeps (Source.Take): the first tokens (rotate --smooth-down, qnn-bundle),
// chunks spread over the samples (keep-float), a share of every sample
// (GPTQ), every sample (calibrate). The readers below stream the samples:
// each is checked, offered and dropped, so memory follows what the rule
// keeps, never the size of the text.

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
