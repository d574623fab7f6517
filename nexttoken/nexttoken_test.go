package nexttoken

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sparkconv/forward"
	"sparkconv/safetensors"
)

const golden = "../testdata/golden/spark-mini-tied"

func TestTopK(t *testing.T) {
	row := []float32{0.5, 2, -1, 2, 0.5, 3}
	var ids []int
	for _, e := range TopK(row, 4, nil) {
		ids = append(ids, e.ID)
		if e.Logit != row[e.ID] || e.Token != nil {
			t.Errorf("entry %+v", e)
		}
	}
	if want := []int{5, 1, 3, 0}; !slices.Equal(ids, want) { // ties: the smaller id first
		t.Errorf("top-4 %v, want %v", ids, want)
	}
	if got := TopK(row, 10, nil); len(got) != len(row) {
		t.Errorf("k above the row: %d entries", len(got))
	}
}

// TestRun: the text is encoded with the folder's tokenizer, the top-1 is
// the dumped logits' argmax, the entries carry token strings, the dump
// names its producer and a second dump is refused without Force.
func TestRun(t *testing.T) {
	ids := []int{3, 4, 5, 6}
	dump := filepath.Join(t.TempDir(), "d.safetensors")
	r, err := Run(Options{Model: golden, Text: "t3 t4 t5 t6", TopK: 3, Dump: dump})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.InputIDs, ids) || r.Tokens != 4 || len(r.TopK) != 3 || r.Layers != 8 || r.Dump != dump {
		t.Fatalf("result %+v", r)
	}
	for _, e := range r.TopK {
		if e.Token == nil || *e.Token == "" {
			t.Errorf("entry %+v has no token string", e)
		}
	}
	got, err := safetensors.OpenFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if _, ok := got.Header.Tensor("logits"); !ok || got.Header.Metadata["producer"] != DumpProducer {
		t.Errorf("dump: logits %v, metadata %v", ok, got.Header.Metadata)
	}
	_, all, _ := got.Float32("logits")
	V := len(all) / len(ids)
	if top := forward.ArgMax(all[len(all)-V:]); r.TopK[0].ID != top {
		t.Errorf("top-1 %d, dump's argmax %d", r.TopK[0].ID, top)
	}
	if V != 512 {
		t.Errorf("dump's logits: %d per position, want the vocabulary (512)", V)
	}
	if _, err := Run(Options{Model: golden, IDs: ids, TopK: 1, Dump: dump}); err == nil || !strings.Contains(err.Error(), "--dump") {
		t.Errorf("second dump without Force: %v", err)
	}
	if _, err := Run(Options{Model: golden, IDs: ids, TopK: 1, Dump: dump, Force: true}); err != nil {
		t.Errorf("with Force: %v", err)
	}
}

func TestRunRefuses(t *testing.T) {
	var tk TopKError
	if _, err := Run(Options{Model: golden, IDs: []int{1}, TopK: 513}); !errors.As(err, &tk) || tk.Vocab != 512 ||
		err.Error() != "--top-k 513: want an integer in [1, 512] (the model's vocab_size)" {
		t.Errorf("top-k above the vocabulary: %v", err)
	}
	if _, err := Run(Options{Model: golden, TopK: 1}); err == nil {
		t.Error("no prompt accepted")
	}
	noTok := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(golden, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(noTok, f), b, 0o644)
	}
	if _, err := Run(Options{Model: noTok, Text: "t3", TopK: 1}); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("text without a tokenizer: %v", err)
	}
	r, err := Run(Options{Model: noTok, IDs: []int{3}, TopK: 2})
	if err != nil || r.TopK[0].Token != nil {
		t.Errorf("ids without a tokenizer: %+v %v", r, err)
	}
}
