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

// Request is one sequence of a batch.
type Request struct {
	IDs   []int
	First int // logits at positions First..len(IDs)-1
	// Layers asks for the residual leaving each layer at those positions
	// too (a LayerModel gives it).
	Layers bool
}

// Output is what a batch gives for one Request.
type Output struct {
	Logits []float32   // [(len(IDs)-First)*V]
	Layers [][]float32 // with Request.Layers: per layer [(len(IDs)-First)*H]
}

// Batcher is a Model that runs several sequences together, layer by layer
// (graph by graph for an export), so each layer's weights are loaded once
// for the whole batch: a streamed full-size model widens each layer once,
// an export holds one ONNX Runtime session at a time. Batch gives exactly
// what one Logits call per request gives, and calls visit in request order,
// each Output valid only during its call.
type Batcher interface {
	Batch(reqs []Request, visit func(i int, out Output) error) error
}

// LayerModel is a Batcher whose batches also give the residual stream
// leaving each layer (the per-layer output error of the report).
type LayerModel interface {
	Batcher
	// LayerShape is the number of layers and the hidden size; 0 layers
	// when this model cannot give them.
	LayerShape() (layers, hidden int)
}

// Generator is a Model that continues prompts greedily itself (with KV
// caches); otherwise Generate runs one Logits call per prompt and token.
type Generator interface {
	// Greedy returns each prompt's gen greedy tokens (argmax, lowest id on
	// ties).
	Greedy(prompts [][]int, gen int) ([][]int, error)
}

// maxBatchTokens bounds one batch's tokens (the residual streams a batch
// holds: 256 MiB on the full model).
const maxBatchTokens = 32768

// RunBatch runs reqs through m and calls visit with each output in order:
// in batches of at most maxBatchTokens tokens when m is a Batcher, else
// one Logits call per request (no layers).
func RunBatch(m Model, reqs []Request, visit func(i int, out Output) error) error {
	b, ok := m.(Batcher)
	if !ok {
		for i, r := range reqs {
			l, err := m.Logits(r.IDs, r.First)
			if err != nil {
				return err
			}
			if err := visit(i, Output{Logits: l}); err != nil {
				return err
			}
		}
		return nil
	}
	for lo := 0; lo < len(reqs); {
		hi, n := lo, 0
		for hi < len(reqs) && (hi == lo || n+len(reqs[hi].IDs) <= maxBatchTokens) {
			n += len(reqs[hi].IDs)
			hi++
		}
		if err := b.Batch(reqs[lo:hi], func(i int, out Output) error { return visit(lo+i, out) }); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// Forward is the reference forward as a Model, LayerModel and Generator.
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

// LayerShape is the config's layer count and hidden size.
func (f Forward) LayerShape() (int, int) { return f.M.Cfg.NumLayers, f.M.Cfg.HiddenSize }

// Batch runs every sequence through layer 0, then layer 1, ...: the
// prefill's computation (the same numbers as Logits), one layer load for
// the whole batch.
func (f Forward) Batch(reqs []Request, visit func(int, Output) error) error {
	m := f.M
	H := m.Cfg.HiddenSize
	xs := make([][]float32, len(reqs))
	outs := make([]Output, len(reqs))
	for s, r := range reqs {
		if len(r.IDs) == 0 || r.First < 0 || r.First >= len(r.IDs) {
			return fmt.Errorf("sequence %d: %d tokens, logits from %d", s, len(r.IDs), r.First)
		}
		x, err := m.Embed(r.IDs)
		if err != nil {
			return fmt.Errorf("sequence %d: %w", s, err)
		}
		xs[s] = x
	}
	for i := range m.Cfg.NumLayers {
		for s, r := range reqs {
			if _, _, err := m.ForwardLayer(i, xs[s], len(r.IDs), nil); err != nil {
				return err
			}
			if r.Layers {
				outs[s].Layers = append(outs[s].Layers, append([]float32(nil), xs[s][r.First*H:]...))
			}
		}
	}
	for s, r := range reqs {
		fn := m.FinalNorm(xs[s])
		xs[s] = nil
		l, err := m.Logits(fn[r.First*H:], len(r.IDs)-r.First)
		if err != nil {
			return err
		}
		outs[s].Logits = l
		if err := visit(s, outs[s]); err != nil {
			return err
		}
		outs[s] = Output{}
	}
	return nil
}

// Greedy continues every prompt at once with KV caches: the prompts are
// prefilled layer by layer (their keys and values fill one cache per layer
// and prompt, as export-onnx's graphs hold them), then each further token
// is one batched decode step (forward.Model.DecodeLayers) for all prompts:
// every layer is loaded once per step, and each step costs one token per
// prompt instead of the whole prefix.
func (f Forward) Greedy(prompts [][]int, gen int) ([][]int, error) {
	m := f.M
	c := m.Cfg
	H, KVD, n := c.HiddenSize, c.KVDim(), len(prompts)
	out := make([][]int, n)
	if n == 0 || gen < 1 {
		return out, nil
	}
	context := 0 // the last fed token sits at position len(p)+gen-2
	for s, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("greedy prompt %d is empty", s)
		}
		context = max(context, len(p)+gen-1)
	}
	caches := make([][]*forward.LayerCache, c.NumLayers) // [layer][prompt]
	xs := make([][]float32, n)
	for s, p := range prompts {
		x, err := m.Embed(p)
		if err != nil {
			return nil, fmt.Errorf("greedy prompt %d: %w", s, err)
		}
		xs[s] = x
	}
	for i := range c.NumLayers {
		for s, p := range prompts {
			k, v, err := m.ForwardLayer(i, xs[s], len(p), nil)
			if err != nil {
				return nil, err
			}
			lc := m.NewLayerCache(i, forward.AutoLayout(c, i), context)
			lc.Fill(k, v)
			caches[i] = append(caches[i], lc)
		}
	}
	x := make([]float32, n*H) // each prompt's last residual, then each step's
	pos := make([]int, n)
	for s, p := range prompts {
		copy(x[s*H:(s+1)*H], xs[s][(len(p)-1)*H:])
		pos[s] = len(p) - 1
	}
	for step := range gen {
		if step > 0 {
			for s := range prompts {
				pos[s]++
				if err := m.EmbedRow(x[s*H:(s+1)*H], out[s][step-1]); err != nil {
					return nil, err
				}
			}
			for i := range c.NumLayers {
				next, k, v, err := m.DecodeLayers(i, x, pos, caches[i])
				if err != nil {
					return nil, err
				}
				for s, lc := range caches[i] {
					lc.Update(pos[s], k[s*KVD:(s+1)*KVD], v[s*KVD:(s+1)*KVD])
				}
				x = next
			}
		}
		logits, err := m.Logits(m.FinalNorm(x), n)
		if err != nil {
			return nil, err
		}
		V := c.VocabSize
		for s := range prompts {
			out[s] = append(out[s], argmax(logits[s*V:(s+1)*V]))
		}
	}
	return out, nil
}
