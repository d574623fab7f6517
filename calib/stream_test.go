package calib

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sparkconv/corpus"
	"sparkconv/tokenizer"
)

// TestPrefixStreamed: Prefix gives exactly the first n tokens
// of Tokenize's chunks of the whole text (the last cut short), the
// sources, the sha256 of the bytes and the sample count; samples after the
// budget are checked but not encoded (an id outside the vocabulary there
// passes, one before it does not).
func TestPrefixStreamed(t *testing.T) {
	dir := tinyModel(t)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	texts, err := ParseSamples([]byte(corpus.Calib), corpus.CalibName, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ n, seqLen int }{{1, 7}, {100, 64}, {3000, 512}, {1 << 30, 256}} {
		all, _, err := Tokenize(tok, texts, c.seqLen, 512)
		if err != nil {
			t.Fatal(err)
		}
		var want []Chunk
		taken := 0
		for _, ch := range all {
			if taken >= c.n {
				break
			}
			ch.IDs = ch.IDs[:min(len(ch.IDs), c.n-taken)]
			want = append(want, ch)
			taken += len(ch.IDs)
		}
		tk, err := Source{Default: CalibText, Tok: tok, Vocab: 512}.read(&Prefix{Tokens: c.n, SeqLen: c.seqLen})
		if err != nil {
			t.Fatal(err)
		}
		got, n, rd := tk.Chunks, tk.Tokens, tk.Read
		if err != nil || n != taken || len(got) != len(want) || rd.Samples != len(texts) || rd.Sources[0] != corpus.CalibName || len(rd.SHA256) != 64 {
			t.Fatalf("n %d: %d chunks, %d tokens, %+v, %v; want %d, %d, %d samples", c.n, len(got), n, rd, err, len(want), taken, len(texts))
		}
		for k := range want {
			if got[k].Sample != want[k].Sample || got[k].Start != want[k].Start || !slices.Equal(got[k].IDs, want[k].IDs) {
				t.Fatalf("n %d: chunk %d differs", c.n, k)
			}
		}
	}
	// A file: the sample count and source, and an id outside the
	// vocabulary after the budget is never encoded, one inside it is
	// refused.
	p := filepath.Join(t.TempDir(), "s.txt")
	os.WriteFile(p, []byte("a\n---\n"+strings.Repeat("zq ", 50)), 0o644)
	first, _ := tok.Encode("a", true)
	second, _ := tok.Encode(strings.Repeat("zq ", 50), true)
	vocab := slices.Max(first) + 1
	if slices.Max(second) < vocab {
		t.Fatalf("the second sample's ids %v fit the first's vocabulary %d", second, vocab)
	}
	src := Source{Files: []string{p}, Tok: tok, Vocab: vocab}
	if tk, err := src.read(&Prefix{Tokens: len(first), SeqLen: 8}); err != nil || tk.Tokens != len(first) || tk.Read.Samples != 2 || tk.Read.Sources[0] != p {
		t.Fatalf("%+v, %v", tk, err)
	}
	if _, err := src.read(&Prefix{Tokens: 1000, SeqLen: 8}); err == nil || !strings.Contains(err.Error(), "sample 2 (line 3)") {
		t.Errorf("an id outside the vocabulary inside the budget: %v", err)
	}
}
