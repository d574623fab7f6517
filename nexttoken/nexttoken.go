// Package nexttoken is the forward command's pipeline: the float32
// reference forward of any checkpoint sparkconv reads (an original, or a
// quantized output through its format's reader, convert.OpenForward) over
// one prompt, the top-k next tokens after its last position, and on request
// a safetensors dump of every position's tensors under the names of the
// reference dumps in testdata/golden/*/expected.safetensors.
package nexttoken

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"sparkconv/convert"
	"sparkconv/forward"
	"sparkconv/outdir"
	"sparkconv/safetensors"
	"sparkconv/tokenizer"
)

// Options of one run. Exactly one of Text and IDs gives the prompt.
type Options struct {
	Model string // checkpoint folder (config.json + safetensors [+ tokenizer.json])
	Text  string // prompt text, encoded with the folder's tokenizer.json (special tokens added)
	IDs   []int  // prompt token ids
	TopK  int    // next-token candidates to return, 1 to the vocabulary size
	Dump  string // safetensors file for every position's tensors ("" for none)
	Force bool   // replace an existing dump (one this command wrote)
}

// Result is what a run found; its JSON is the command's --json output.
type Result struct {
	Dump     string  `json:"dump"`
	Format   string  `json:"format"` // the checkpoint's format (forward.Weights' Describe)
	InputIDs []int   `json:"input_ids"`
	Model    string  `json:"model"`
	Seconds  float64 `json:"seconds"`
	Tokens   int     `json:"tokens"`
	TopK     []Entry `json:"top_k"`
	Layers   int     `json:"-"` // the model's layers (in the dump)
}

// Entry is one next-token candidate; Token is its text when the folder has
// a tokenizer.json.
type Entry struct {
	ID    int     `json:"id"`
	Logit float32 `json:"logit"`
	Token *string `json:"token,omitempty"`
}

// DumpProducer is the metadata producer of a dump file, by which Force
// recognises one it may replace.
const DumpProducer = "sparkconv forward"

var dumpOwner = safetensors.MetadataOwner("producer", DumpProducer)

// TopKError refuses a TopK larger than the model's vocabulary, known only
// once the model is open (the command's usage error).
type TopKError struct{ K, Vocab int }

func (e TopKError) Error() string {
	return fmt.Sprintf("--top-k %d: want an integer in [1, %d] (the model's vocab_size)", e.K, e.Vocab)
}

// Run refuses a dump file it may not write, encodes the prompt, opens the
// model, runs the prefill and returns the top-k after the last position,
// writing the dump (all or nothing) when o.Dump is set.
func Run(o Options) (*Result, error) {
	start := time.Now()
	if (o.Text == "") == (len(o.IDs) == 0) {
		return nil, errors.New("give exactly one of --text and --ids")
	}
	var dumpFile *outdir.File
	if o.Dump != "" {
		var err error
		if dumpFile, err = outdir.NewFile(o.Dump, o.Force, dumpOwner, o.Model); err != nil {
			return nil, fmt.Errorf("--dump: %w", err)
		}
	}
	tok, err := loadTokenizer(o.Model, o.Text != "")
	if err != nil {
		return nil, err
	}
	input := o.IDs
	if o.Text != "" {
		if input, err = tok.Encode(o.Text, true); err != nil {
			return nil, err
		}
		if len(input) == 0 {
			return nil, fmt.Errorf("--text gives no tokens")
		}
	}
	m, err := convert.OpenForward(o.Model, forward.Options{})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if V := m.Cfg.VocabSize; o.TopK < 1 || o.TopK > V {
		return nil, TopKError{K: o.TopK, Vocab: V}
	}
	opt := forward.PrefillOptions{Dump: o.Dump != "", Logits: forward.LastLogits}
	if opt.Dump {
		opt.Logits = forward.AllLogits
	}
	r, err := m.Prefill(input, opt)
	if err != nil {
		return nil, err
	}
	V := m.Cfg.VocabSize
	top := TopK(r.Logits[len(r.Logits)-V:], o.TopK, tok)
	if dumpFile != nil {
		meta := safetensors.WriteOptions{Metadata: map[string]string{"producer": DumpProducer}}
		if err := safetensors.WriteFile(dumpFile, r.Tensors(m, input), meta); err != nil {
			return nil, err
		}
	}
	return &Result{
		Dump: o.Dump, Format: m.W.Describe(), InputIDs: input, Model: o.Model, Tokens: len(input), TopK: top,
		Layers: m.Cfg.NumLayers, Seconds: time.Since(start).Seconds(),
	}, nil
}

// loadTokenizer loads dir/tokenizer.json; it is an error only when needed
// (without it the top-k has no token strings).
func loadTokenizer(dir string, needed bool) (*tokenizer.Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && !needed {
		return nil, nil
	}
	tok, err := tokenizer.Load(path)
	if err != nil && !needed {
		return nil, nil
	}
	return tok, err
}

// TopK returns the k largest logits of row, ties broken by the smaller id,
// with each token's text when tok is set.
func TopK(row []float32, k int, tok *tokenizer.Tokenizer) []Entry {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return 0
	})
	var out []Entry
	for _, id := range idx[:min(k, len(idx))] {
		e := Entry{ID: id, Logit: row[id]}
		if tok != nil {
			s := tok.Decode([]int{id}, false)
			e.Token = &s
		}
		out = append(out, e)
	}
	return out
}
