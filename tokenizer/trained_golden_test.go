package tokenizer

import (
	"os"
	"path/filepath"
	"testing"
)

// trainedDir holds small tokenizers of every model type (BPE, WordPiece,
// WordLevel, Unigram) trained with the Hugging Face library itself, each
// with the reference's ids for the public texts and its decode of them
// (interop/gen_tokenizers.py wrote them; testdata/tokenizers/trained/MANIFEST.txt).
func trainedDir() string { return filepath.Join("..", "testdata", "tokenizers", "trained") }

func trainedNames(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(trainedDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) < 8 {
		t.Fatalf("only %d trained tokenizers in %s", len(names), trainedDir())
	}
	return names
}

// TestTrainedGolden encodes every public line with every trained tokenizer,
// plain and with special tokens, and decodes the plain ids: all must be
// exactly the reference's.
func TestTrainedGolden(t *testing.T) {
	texts := goldenTexts(t)
	for _, name := range trainedNames(t) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(trainedDir(), name)
			tk, err := Load(filepath.Join(dir, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			plain := readJSONL(t, filepath.Join(dir, "public.jsonl"))
			special := readJSONL(t, filepath.Join(dir, "public.special.jsonl"))
			if len(plain) != len(texts) || len(special) != len(texts) {
				t.Fatalf("golden files have %d and %d lines, public.jsonl %d", len(plain), len(special), len(texts))
			}
			bad := 0
			for i, text := range texts {
				for _, v := range []struct {
					want    goldenRecord
					special bool
				}{{plain[i], false}, {special[i], true}} {
					got, err := tk.Encode(text, v.special)
					if err != nil {
						t.Errorf("line %d: %v", i+1, err)
						bad++
						continue
					}
					if d := firstDiff(got, v.want.IDs); d >= 0 {
						if bad++; bad <= 5 {
							t.Errorf("line %d (special %v): first difference at token %d: got %s, want %s (%d vs %d tokens)",
								i+1, v.special, d, describe(tk, got, d), describeWant(plain[i], d), len(got), len(v.want.IDs))
						}
					}
				}
				if got := tk.Decode(plain[i].IDs, false); got != plain[i].Decoded {
					if bad++; bad <= 5 {
						t.Errorf("line %d: decode gives %q, want %q", i+1, trunc(got), trunc(plain[i].Decoded))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%s: %d mismatches over %d lines", name, bad, len(texts))
			}
		})
	}
}

func trunc(s string) string {
	if r := []rune(s); len(r) > 80 {
		return string(r[:80]) + "..."
	}
	return s
}
