package calib

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sparkconv/corpus"
	"sparkconv/tokenizer"
)

// tinyTok is a tokenizer of the tiny fixture's kind (512 ids).
func tinyTok(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(filepath.Join(tinyModel(t), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// manySamples writes a file of 4000 samples of every length from 1 to 97
// words of the corpus (its "---" separators left out: a sample of that
// word alone would be a separator).
func manySamples(t *testing.T) string {
	t.Helper()
	words := slices.DeleteFunc(strings.Fields(corpus.Calib), func(w string) bool { return w == "---" })
	var b strings.Builder
	for i := range 4000 {
		if i > 0 {
			b.WriteString("\n---\n")
		}
		n := 1 + (i*7919)%97
		b.WriteString(strings.Join(words[(i*31)%(len(words)-n):][:n], " "))
	}
	file := filepath.Join(t.TempDir(), "many.txt")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// allChunks is every sample of files, tokenized whole.
func allChunks(t *testing.T, tok *tokenizer.Tokenizer, files []string) ([]Text, []Chunk, Read) {
	t.Helper()
	var texts []Text
	rd, err := EachSample(files, CalibText, func(x Text) error { texts = append(texts, x); return nil })
	if err != nil {
		t.Fatal(err)
	}
	all, _, err := Tokenize(tok, texts, 512, 512)
	if err != nil {
		t.Fatal(err)
	}
	return texts, all, rd
}

func sameChunks(t *testing.T, what string, got, want []Chunk) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d chunks, want %d", what, len(got), len(want))
	}
	for k := range want {
		if got[k].Sample != want[k].Sample || got[k].Start != want[k].Start || !slices.Equal(got[k].IDs, want[k].IDs) {
			t.Fatalf("%s: chunk %d differs: %+v, want %+v", what, k, got[k], want[k])
		}
	}
}

// TestShareStreamed: Share, which cuts what it holds to the budget while
// reading, selects exactly what shareChunks selects from the whole text's
// chunks, for budgets that cut at every sample, in the middle of a round
// and not at all, on the built-in corpus and on a file of 4000 samples of
// every length.
func TestShareStreamed(t *testing.T) {
	tok := tinyTok(t)
	for _, files := range [][]string{nil, {manySamples(t)}} {
		texts, all, rd := allChunks(t, tok, files)
		for _, budget := range []int{128, 1000, 8192, 100000, 1 << 30} {
			want := shareChunks(all, budget, 256)
			got, err := Source{Files: files, Default: CalibText, Tok: tok, Vocab: 512}.Take(&Share{Budget: budget, SeqLen: 256})
			if err != nil || got.Read.SHA256 != rd.SHA256 || got.Read.Samples != len(texts) {
				t.Fatalf("budget %d: %+v, %v", budget, got, err)
			}
			sameChunks(t, "share", got.Chunks, want)
			if got.Tokens != countTokens(want) {
				t.Fatalf("budget %d: %d tokens, want %d", budget, got.Tokens, countTokens(want))
			}
		}
	}
}

// TestAll: the All rule takes what Select and Tokenize take, the texts
// too, every sample or a drawn subset.
func TestAll(t *testing.T) {
	tok := tinyTok(t)
	file := manySamples(t)
	texts, _, _ := allChunks(t, tok, []string{file})
	for _, n := range []int{0, 7, 3999, 4000, 5000} {
		sel := Select(texts, n, 5)
		want, _, err := Tokenize(tok, sel, 64, 512)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Source{Files: []string{file}, Tok: tok, Vocab: 512}.Take(&All{MaxSamples: n, Seed: 5, SeqLen: 64})
		if err != nil {
			t.Fatal(err)
		}
		sameChunks(t, "all", got.Chunks, want)
		if !slices.Equal(got.Texts, sel) {
			t.Fatalf("max %d: texts differ", n)
		}
	}
}

// TestSpread: chunks are taken at an even stride over the samples and cut
// at the token budget.
func TestSpread(t *testing.T) {
	const L = 16
	for _, c := range []struct {
		tokens  int
		samples []int
		last    int
	}{{L, []int{0}, L}, {2 * L, []int{0, 4}, L}, {2*L + 5, []int{0, 2, 5}, 5}, {64 * L, []int{0, 1, 2, 3, 4, 5, 6, 7}, L}} {
		s := &Spread{Tokens: c.tokens, ChunkLen: L}
		s.start(8)
		for i := range 8 {
			if !s.offer(i, Text{}, make([]int, 2*L)) {
				break
			}
		}
		got, _ := s.take()
		var smp []int
		for _, ch := range got {
			smp = append(smp, ch.Sample)
		}
		if !slices.Equal(smp, c.samples) || len(got[len(got)-1].IDs) != c.last {
			t.Errorf("spread(%d) = samples %v, last %d tokens; want %v, %d", c.tokens, smp, len(got[len(got)-1].IDs), c.samples, c.last)
		}
	}
}

// TestTakeChecks: the count rule (with the flag that sets it), the
// command's own rule and the variety rule are reported at once, named by
// the text's source; warnings go to the Log only.
func TestTakeChecks(t *testing.T) {
	tok := tinyTok(t)
	dir := t.TempDir()
	short := filepath.Join(dir, "short.txt")
	os.WriteFile(short, []byte(strings.Repeat("a ", 100)), 0o644)
	also := errors.New("the command's own rule")
	_, err := Source{Files: []string{short}, Tok: tok, Vocab: 512, MinTokens: 200, MinFlag: "--min-tokens",
		Also: func(int) (string, error) { return "", also }}.Take(&Prefix{Tokens: 1 << 20, SeqLen: 64})
	for _, want := range []string{short + ": ", "fewer than the 200 needed (--min-tokens)", "the command's own rule", "distinct ids"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if !errors.Is(err, also) {
		t.Errorf("error %v does not wrap the command's own", err)
	}
	var log bytes.Buffer
	_, err = Source{Default: CalibText, Tok: tok, Vocab: 512, Log: &log,
		Also: func(n int) (string, error) { return "a warning", nil }}.Take(&Prefix{Tokens: 512, SeqLen: 64})
	if err != nil || log.String() != "sparkconv: warning: "+CalibText.Name+": a warning\n" {
		t.Errorf("warning: %q, %v", log.String(), err)
	}
	if _, err := (Source{Default: CalibText, Tok: tok, Vocab: 512}).Take(&Share{Budget: 512}); err == nil || !strings.Contains(err.Error(), "sequence length 0") {
		t.Errorf("seq-len 0: %v", err)
	}
}
