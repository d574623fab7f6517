package calib

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"sparkconv/fixtures/corpus"
	"sparkconv/infile"
)

// ReadTexts reads the samples files (ReadSamples' formats; none: the
// embedded corpus) and returns the samples, their sources and the sha256
// of their bytes concatenated in order.
func ReadTexts(files []string) ([]Text, []string, string, error) {
	h := sha256.New()
	if len(files) == 0 {
		h.Write([]byte(corpus.Calib))
		t, err := ParseSamples([]byte(corpus.Calib), corpus.CalibName, false)
		return t, []string{corpus.CalibName}, hex.EncodeToString(h.Sum(nil)), err
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
