package eval

import (
	"fmt"

	"sparkconv/forward"
)

// Model is what eval scores: a model that gives the logits at chosen
// positions of a token sequence. The reference forward (any checkpoint or
// quantized output) is one; an ONNX export driven in ONNX Runtime is
// another (package evalort).
type Model interface {
	// Describe names the model in one line.
	Describe() string
	// Vocab is the vocabulary size (the logits' row length).
	Vocab() int
	// Logits returns the logits [len(ids)-first, V] at positions
	// first..len(ids)-1 of the causal sequence ids (position = index).
	Logits(ids []int, first int) ([]float32, error)
}

// Generator is a Model that can continue several prompts greedily at
// once (the base's greedy continuations are made with it when available;
// otherwise one Logits call per prompt and token).
type Generator interface {
	// NextLogits returns, for each sequence, the logits [V] after its last
	// token.
	NextLogits(seqs [][]int) ([][]float32, error)
}

// LayerModel is a Model that also gives the residual stream leaving each
// layer (the per-layer output error of the report).
type LayerModel interface {
	// LayerShape is the number of layers and the hidden size.
	LayerShape() (layers, hidden int)
	// LogitsLayers is Logits plus, per layer, the residual leaving it at
	// positions first..len(ids)-1, [(len(ids)-first)*hidden].
	LogitsLayers(ids []int, first int) ([]float32, [][]float32, error)
}

// Forward is the reference forward as a Model, Generator and LayerModel.
type Forward struct{ M *forward.Model }

// Describe names the weights the forward reads.
func (f Forward) Describe() string { return f.M.W.Describe() }

// Vocab is the config's vocab_size.
func (f Forward) Vocab() int { return f.M.Cfg.VocabSize }

// Logits runs the prefill, with the head only from position first.
func (f Forward) Logits(ids []int, first int) ([]float32, error) {
	r, err := f.M.Prefill(ids, forward.PrefillOptions{Logits: forward.AllLogits, LogitsFrom: first})
	if err != nil {
		return nil, err
	}
	return r.Logits, nil
}

// NextLogits runs the sequences layer by layer, all sequences through a
// layer before the next one is loaded, so a streamed (full-size) model
// widens each layer once per call rather than once per sequence.
func (f Forward) NextLogits(seqs [][]int) ([][]float32, error) {
	m := f.M
	H := m.Cfg.HiddenSize
	xs := make([][]float32, len(seqs))
	for s, ids := range seqs {
		x, err := m.Embed(ids)
		if err != nil {
			return nil, fmt.Errorf("sequence %d: %w", s, err)
		}
		xs[s] = x
	}
	for i := range m.Cfg.NumLayers {
		for s, ids := range seqs {
			if _, _, err := m.ForwardLayer(i, xs[s], len(ids), nil); err != nil {
				return nil, err
			}
		}
	}
	out := make([][]float32, len(seqs))
	for s, ids := range seqs {
		fn := m.FinalNorm(xs[s][(len(ids)-1)*H:])
		l, err := m.Logits(fn, 1)
		if err != nil {
			return nil, err
		}
		out[s] = l
	}
	return out, nil
}

// LayerShape is the config's layer count and hidden size.
func (f Forward) LayerShape() (int, int) { return f.M.Cfg.NumLayers, f.M.Cfg.HiddenSize }

// LogitsLayers runs the prefill with the per-layer dump.
func (f Forward) LogitsLayers(ids []int, first int) ([]float32, [][]float32, error) {
	r, err := f.M.Prefill(ids, forward.PrefillOptions{Dump: true, Logits: forward.AllLogits, LogitsFrom: first})
	if err != nil {
		return nil, nil, err
	}
	H := f.M.Cfg.HiddenSize
	outs := append(r.HiddenIn[1:], r.HiddenOut)
	layers := make([][]float32, len(outs))
	for i, x := range outs {
		layers[i] = append([]float32(nil), x[first*H:]...)
	}
	return r.Logits, layers, nil
}
