package calib

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"

	"sparkconv/fixtures/corpus"
	"sparkconv/infile"
	"sparkconv/tokenizer"
)

// ReadTexts reads the samples files (ReadSamples' formats; none: the
// embedded corpus) and returns the samples, their sources and the sha256
// of their bytes concatenated in order.
func ReadTexts(files []string) ([]Text, []string, string, error) {
	return ReadTextsOr(files, corpus.Calib, corpus.CalibName)
}

// ReadTextsOr is ReadTexts with another built-in text, def (named defName
// in the sources), for no files.
func ReadTextsOr(files []string, def, defName string) ([]Text, []string, string, error) {
	h := sha256.New()
	if len(files) == 0 {
		h.Write([]byte(def))
		t, err := ParseSamples([]byte(def), defName, false)
		return t, []string{defName}, hex.EncodeToString(h.Sum(nil)), err
	}
	var texts []Text
	for _, f := range files {
		if err := hashFile(h, f); err != nil {
			return nil, nil, "", err
		}
		t, err := ReadSamples(f)
		if err != nil {
			return nil, nil, "", err
		}
		texts = append(texts, t...)
	}
	return texts, files, hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile adds the bytes of a (regular) file to h.
func hashFile(h io.Writer, path string) error {
	f, _, err := infile.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// LoadTokenizer reads dir's tokenizer.json and returns it with its unknown
// token's id (UnkID: -1 when it has none).
func LoadTokenizer(dir string) (*tokenizer.Tokenizer, int, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := infile.ReadFile(path, infile.TokenizerMax)
	if err != nil {
		return nil, 0, err
	}
	return ParseTokenizer(data, path)
}

// ParseTokenizer parses the tokenizer.json bytes data (path names them in
// errors) and returns it with its unknown token's id (-1: none).
func ParseTokenizer(data []byte, path string) (*tokenizer.Tokenizer, int, error) {
	tok, err := tokenizer.Parse(data)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return tok, UnkID(data, tok), nil
}

// Stream is the samples' tokens (Tokenize's, each sample with the
// tokenizer's special tokens) concatenated in order, at most n of them.
func Stream(tok *tokenizer.Tokenizer, texts []Text, n, vocab int) ([]int, error) {
	chunks, _, err := Tokenize(tok, texts, n, vocab)
	if err != nil {
		return nil, err
	}
	chunks, _ = Prefix(chunks, n)
	var ids []int
	for _, c := range chunks {
		ids = append(ids, c.IDs...)
	}
	return ids, nil
}

// Prefix is the first n tokens of chunks (the last chunk cut short), and
// how many tokens that is.
func Prefix(chunks []Chunk, n int) ([]Chunk, int) {
	var out []Chunk
	taken := 0
	for _, ch := range chunks {
		if taken >= n {
			break
		}
		ch.IDs = ch.IDs[:min(len(ch.IDs), n-taken)]
		out = append(out, ch)
		taken += len(ch.IDs)
	}
	return out, taken
}
