package tokenizer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"
)

// trainCorpus is the project's calibration text (58.9 KB of English and
// code), the corpus the fixtures train on.
func trainCorpus(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "corpus", "calib.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestTrainByteLevelBPE(t *testing.T) {
	corpus := trainCorpus(t) + "\nCafe\u0301 <|im_start|>user\nhi<|im_end|> 数字 12345 emoji 👍🏽\n"
	for _, size := range []int{259, 300, 512, 2048, 131072} {
		start := time.Now()
		data, err := TrainByteLevelBPE(corpus, size)
		if err != nil {
			t.Fatalf("train %d: %v", size, err)
		}
		elapsed := time.Since(start)
		tk, err := Parse(data)
		if err != nil {
			t.Fatalf("vocab %d: trained tokenizer does not load: %v", size, err)
		}
		if tk.VocabSize() != size {
			t.Errorf("vocab %d: VocabSize() = %d", size, tk.VocabSize())
		}
		ids, err := tk.Encode(corpus, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if id < 0 || id >= size {
				t.Fatalf("vocab %d: id %d out of range", size, id)
			}
		}
		if got, want := tk.Decode(ids, false), norm.NFC.String(corpus); got != want {
			t.Errorf("vocab %d: decode(encode(corpus)) differs from NFC(corpus)", size)
		}
		for i, s := range TrainSpecialTokens {
			if id, ok := tk.TokenToID(s); !ok || id != size-len(TrainSpecialTokens)+i {
				t.Errorf("vocab %d: %s has id %d (%v)", size, s, id, ok)
			}
		}
		im, _ := tk.Encode("<|im_start|>", false)
		if len(im) != 1 || im[0] != size-2 {
			t.Errorf("vocab %d: <|im_start|> encodes to %v", size, im)
		}
		t.Logf("vocab %6d: trained in %v, %d merges, %d bytes of JSON, corpus -> %d tokens (%.2f bytes/token)",
			size, elapsed.Round(time.Millisecond), tk.model.(*bpe).merges.n, len(data), len(ids), float64(len(corpus))/float64(len(ids)))
		if size < 131072 && tk.model.(*bpe).merges.n != size-256-len(TrainSpecialTokens) {
			t.Errorf("vocab %d: %d merges, want %d", size, tk.model.(*bpe).merges.n, size-256-len(TrainSpecialTokens))
		}
		if size == 2048 && float64(len(corpus))/float64(len(ids)) < 2.5 {
			t.Errorf("vocab 2048 compresses the corpus only to %.2f bytes/token", float64(len(corpus))/float64(len(ids)))
		}
		if size == 259 && len(ids) != len(norm.NFC.String(corpus))-len("<|im_start|><|im_end|>")+2 {
			t.Errorf("vocab 259 (no merges) should give one token per byte, got %d tokens", len(ids))
		}
	}
}

func TestTrainDeterministic(t *testing.T) {
	corpus := trainCorpus(t)
	a, err := TrainByteLevelBPE(corpus, 1024)
	if err != nil {
		t.Fatal(err)
	}
	b, err := TrainByteLevelBPE(corpus, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two runs produced different tokenizer.json")
	}
}

func TestTrainPadsWithFillers(t *testing.T) {
	data, err := TrainByteLevelBPE("abab abab", 300)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	// "abab abab" -> words "abab", " abab": few merges, the rest fillers.
	filler, ok := tk.IDToToken(296)
	if !ok || !strings.HasPrefix(filler, "<|reserved_") {
		t.Errorf("id 296 = %q, want a filler", filler)
	}
	ids, _ := tk.Encode("abab abab", false)
	if len(ids) != 2 {
		t.Errorf("corpus words should be single tokens, got %v", ids)
	}
	if _, err := TrainByteLevelBPE("x", 258); err == nil {
		t.Error("vocab below 259 accepted")
	}
}

// BenchmarkTrain reports how long training a 2048 vocabulary on the
// calibration corpus takes (MB/s of corpus).
func BenchmarkTrain(b *testing.B) {
	corpus := trainCorpus(b)
	b.SetBytes(int64(len(corpus)))
	cpu0 := processCPUSeconds()
	for b.Loop() {
		if _, err := TrainByteLevelBPE(corpus, 2048); err != nil {
			b.Fatal(err)
		}
	}
	if cpu := processCPUSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(cpu/float64(b.N)*1e3, "cpu-ms/train")
	}
}
