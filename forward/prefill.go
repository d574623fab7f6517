package forward

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"sparkconv/dtype"
	"sparkconv/safetensors"
)

// LogitsMode says which positions' logits Prefill computes.
type LogitsMode int

// Logits modes.
const (
	AllLogits  LogitsMode = iota // [T, V]
	LastLogits                   // [1, V], the next token after the sequence
	NoLogits                     // none (the head is not run)
)

// PrefillOptions select what Prefill records.
type PrefillOptions struct {
	// Dump keeps every layer's input, keys and values, the last residual
	// and the final norm in the Result.
	Dump   bool
	Logits LogitsMode
	// LogitsFrom, with AllLogits, skips the head for positions before it:
	// Result.Logits is then [T-LogitsFrom, V] (what an evaluation that
	// scores the second half of a window needs).
	LogitsFrom int
	Observer   Observer // sees every intermediate tensor, when not nil
}

// Result holds what Prefill computed, row-major, for T positions.
type Result struct {
	T      int
	Logits []float32 // [T, V] ([T-LogitsFrom, V]), [1, V] for LastLogits, nil for NoLogits
	// With Dump: per layer i, HiddenIn[i] [T, H] is the residual entering
	// it (HiddenIn[0] the embedding rows), Key[i] and Value[i] [T, KV, D]
	// its keys after RoPE and values.
	HiddenIn   [][]float32
	Key, Value [][]float32
	HiddenOut  []float32 // [T, H] residual after the last layer (with Dump)
	FinalNorm  []float32 // [T, H] rmsnorm(HiddenOut) * model.norm.weight
}

// Prefill runs the causal forward over ids (position p = index).
func (m *Model) Prefill(ids []int, opt PrefillOptions) (*Result, error) {
	T := len(ids)
	if T == 0 {
		return nil, fmt.Errorf("prefill: no tokens")
	}
	x, err := m.Embed(ids)
	if err != nil {
		return nil, err
	}
	r := &Result{T: T}
	for i := range m.Cfg.NumLayers {
		if opt.Dump {
			r.HiddenIn = append(r.HiddenIn, append([]float32(nil), x...))
		}
		k, v, err := m.ForwardLayer(i, x, T, opt.Observer)
		if err != nil {
			return nil, err
		}
		if opt.Dump {
			r.Key, r.Value = append(r.Key, k), append(r.Value, v)
		}
	}
	if opt.Dump {
		r.HiddenOut = x
	}
	fn := m.FinalNorm(x)
	r.FinalNorm = fn
	if opt.Observer != nil {
		opt.Observer.Observe(ModelLevel, FinalNorm, fn, m.Cfg.HiddenSize)
	}
	switch opt.Logits {
	case AllLogits:
		from := min(max(opt.LogitsFrom, 0), T-1)
		r.Logits, err = m.observedLogits(fn[from*m.Cfg.HiddenSize:], T-from, opt.Observer)
	case LastLogits:
		r.Logits, err = m.observedLogits(fn[(T-1)*m.Cfg.HiddenSize:], 1, opt.Observer)
	}
	return r, err
}

// observedLogits is Logits with each block of logits shown to obs (nil:
// none) as it is computed.
func (m *Model) observedLogits(fn []float32, T int, obs Observer) ([]float32, error) {
	V := m.Cfg.VocabSize
	logits := make([]float32, T*V)
	err := m.HeadBlocks(fn, T, func(v0, v1 int, blk []float32) {
		nb := v1 - v0
		if obs != nil {
			obs.Observe(ModelLevel, Logits, blk, nb)
		}
		for t := range T {
			copy(logits[t*V+v0:t*V+v1], blk[t*nb:(t+1)*nb])
		}
	})
	if err == nil {
		err = firstNonFinite(ModelLevel, pointData{FinalNorm, fn[:T*m.Cfg.HiddenSize], m.Cfg.HiddenSize}, pointData{Logits, logits, V})
	}
	if err != nil {
		return nil, err
	}
	return logits, nil
}

// Tensors returns the result under the names, shapes and meaning of
// testdata/golden/*/expected.safetensors: input_ids I64 [T], logits [T, V],
// hidden_in.{i} [T, H], key.{i} and value.{i} [T, KV, D], hidden_out and
// final_norm [T, H], all F32. Tensors not computed are left out.
func (r *Result) Tensors(m *Model, ids []int) []safetensors.Tensor {
	c := m.Cfg
	T, H := int64(r.T), int64(c.HiddenSize)
	kv := []int64{T, int64(c.NumKVHeads), int64(c.HeadDim)}
	out := []safetensors.Tensor{{Name: "input_ids", DType: dtype.I64, Shape: []int64{T}, Produce: func() ([]byte, error) {
		b := make([]byte, 8*len(ids))
		for k, id := range ids {
			binary.LittleEndian.PutUint64(b[8*k:], uint64(int64(id)))
		}
		return b, nil
	}}}
	add := func(name string, data []float32, shape ...int64) {
		if data != nil {
			out = append(out, F32Tensor(name, data, shape...))
		}
	}
	add("logits", r.Logits, int64(len(r.Logits))/int64(c.VocabSize), int64(c.VocabSize))
	for i := range r.HiddenIn {
		s := strconv.Itoa(i)
		add("hidden_in."+s, r.HiddenIn[i], T, H)
		add("key."+s, r.Key[i], kv...)
		add("value."+s, r.Value[i], kv...)
	}
	add("hidden_out", r.HiddenOut, T, H)
	add("final_norm", r.FinalNorm, T, H)
	return out
}

// F32Tensor wraps float32 data as a safetensors F32 tensor to write.
func F32Tensor(name string, data []float32, shape ...int64) safetensors.Tensor {
	return safetensors.Tensor{Name: name, DType: dtype.F32, Shape: shape, Produce: func() ([]byte, error) {
		b := make([]byte, 4*len(data))
		for k, v := range data {
			binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(v))
		}
		return b, nil
	}}
}
