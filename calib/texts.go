package calib

import (
	"fmt"
	"path/filepath"

	"sparkconv/infile"
	"sparkconv/tokenizer"
)

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
