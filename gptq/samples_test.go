package gptq

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sparkconv/calib"
	"sparkconv/corpus"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/tokenizer"
)

// TestReadChunksStreamed: ReadChunks, which cuts what it holds to the
// budget while reading, selects exactly what selectChunks selects from the
// whole text's chunks, for budgets that cut at every sample, in the middle
// of a round and not at all, on the built-in corpus and on a file of
// 4000 samples of every length.
func TestReadChunksStreamed(t *testing.T) {
	tok, err := tokenizer.Load(filepath.Join(fixturestest.Tiny(t, false), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(corpus.Calib)
	var b strings.Builder
	for i := range 4000 {
		if i > 0 {
			b.WriteString("\n---\n")
		}
		n := 1 + (i*7919)%97
		b.WriteString(strings.Join(words[(i*31)%(len(words)-n):][:n], " "))
	}
	file := filepath.Join(t.TempDir(), "many.txt")
	os.WriteFile(file, []byte(b.String()), 0o644)
	for _, files := range [][]string{nil, {file}} {
		var texts []calib.Text
		rd, err := calib.EachSample(files, calib.CalibText, func(x calib.Text) error { texts = append(texts, x); return nil })
		if err != nil {
			t.Fatal(err)
		}
		all, _, err := calib.Tokenize(tok, texts, 512, 512)
		if err != nil {
			t.Fatal(err)
		}
		for _, budget := range []int{128, 1000, 8192, 100000, 1 << 30} {
			want := selectChunks(all, budget, 256)
			got, gotRead, err := ReadChunks(tok, files, 512, budget, 256)
			if err != nil || gotRead.SHA256 != rd.SHA256 || gotRead.Samples != len(texts) {
				t.Fatalf("budget %d: %+v, %v", budget, gotRead, err)
			}
			if len(got) != len(want) {
				t.Fatalf("%v budget %d: %d chunks, want %d", files, budget, len(got), len(want))
			}
			for k := range want {
				if got[k].Sample != want[k].Sample || got[k].Start != want[k].Start || !slices.Equal(got[k].IDs, want[k].IDs) {
					t.Fatalf("%v budget %d: chunk %d differs", files, budget, k)
				}
			}
		}
	}
}
