package onnxgraph

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// This file is the runtime side of the decode-step contract
// (docs/formats.md#onnx-decode-step, "What a runtime does per token"): the caches as a
// runtime holds them, the rope inputs and the masks it builds, the feeds
// it passes and how it stores what a graph returns. ONNX Runtime (ortrun),
// the bundle's calibration capture (qnn) and tests share it, so every
// consumer feeds the graphs exactly the same way.

// CacheState is one layer's KV cache as the runtime holds it, in the graph
// layouts: Key [KV, D, C], Value [KV, C, D].
type CacheState struct {
	Info       LayerInfo
	KV, D      int
	Key, Value []float32
	// Written marks ring slots that hold a real entry; for roll the real
	// entries are the last Filled slots.
	Written []bool
	Filled  int
}

// NewCacheState makes layer li's cache of graph g, never-written slots
// filled with uniform random values in [-keyGarbage, keyGarbage] and
// [-valueGarbage, valueGarbage] drawn from rng (0: zero).
func NewCacheState(g *GraphEntry, li LayerInfo, rng *rand.Rand, keyGarbage, valueGarbage float64) (*CacheState, error) {
	sfx := LayerSuffix(g.Kind, li.Layer)
	pk, ok := g.Tensor("past_key" + sfx)
	if !ok || len(pk.Shape) != 4 || pk.Shape[3] != int64(li.CacheSlots) {
		return nil, fmt.Errorf("%s: layer %d: past_key%s missing or not [1,KV,D,%d]", g.File, li.Layer, sfx, li.CacheSlots)
	}
	st := &CacheState{Info: li, KV: int(pk.Shape[1]), D: int(pk.Shape[2])}
	n := st.KV * st.D * li.CacheSlots
	st.Key, st.Value = make([]float32, n), make([]float32, n)
	for i := range n {
		st.Key[i] = float32(keyGarbage * (2*rng.Float64() - 1))
		st.Value[i] = float32(valueGarbage * (2*rng.Float64() - 1))
	}
	st.Written = make([]bool, li.CacheSlots)
	return st, nil
}

// RoPEInputs returns rope_cos and rope_sin [R/2] for position p:
// angle_j = p * theta^(-2j/R), computed in float64, rounded once.
func RoPEInputs(p int, theta float64, r int) (cos, sin []float32) {
	cos, sin = make([]float32, r/2), make([]float32, r/2)
	for j := range cos {
		a := float64(p) * math.Pow(theta, -float64(2*j)/float64(r))
		s, c := math.Sincos(a)
		cos[j], sin[j] = float32(c), float32(s)
	}
	return cos, sin
}

// Mask returns the additive mask [C+1] for the cache's current contents.
func (st *CacheState) Mask(maskValue float32) []float32 {
	c := st.Info.CacheSlots
	m := make([]float32, c+1)
	for s := range c {
		var real bool
		if st.Info.Layout == LayoutRoll {
			real = s >= c-st.Filled
		} else {
			real = st.Written[s]
		}
		if !real {
			m[s] = maskValue
		}
	}
	return m
}

// Feeds returns the layer's inputs (except hidden_in) at position p.
func (st *CacheState) Feeds(dt DType, p int, maskValue float32, sfx string) map[string]Tensor {
	li, kv, d := st.Info, int64(st.KV), int64(st.D)
	c := int64(li.CacheSlots)
	cos, sin := RoPEInputs(p, li.RopeTheta, li.RotaryDims)
	half := int64(li.RotaryDims / 2)
	return map[string]Tensor{
		"rope_cos" + sfx:       FloatTensor(dt, []int64{1, 1, half}, cos),
		"rope_sin" + sfx:       FloatTensor(dt, []int64{1, 1, half}, sin),
		"past_key" + sfx:       FloatTensor(dt, []int64{1, kv, d, c}, st.Key),
		"past_value" + sfx:     FloatTensor(dt, []int64{1, kv, c, d}, st.Value),
		"attention_mask" + sfx: FloatTensor(dt, []int64{1, 1, 1, c + 1}, st.Mask(maskValue)),
	}
}

// Update stores the step's outputs into the cache and returns the new
// entry (key [KV*D], value [KV*D]).
func (st *CacheState) Update(out map[string]Tensor, p int, sfx string) (key, value []float32, err error) {
	c, kv, d := st.Info.CacheSlots, st.KV, st.D
	key, value = make([]float32, kv*d), make([]float32, kv*d)
	if st.Info.Layout == LayoutRing {
		nk, ok1 := out["new_key"+sfx]
		nv, ok2 := out["new_value"+sfx]
		if !ok1 || !ok2 {
			return nil, nil, fmt.Errorf("layer %d: no new_key%s/new_value%s output", st.Info.Layer, sfx, sfx)
		}
		copy(key, nk.Floats())
		copy(value, nv.Floats())
		slot := p % c
		for h := range kv {
			for j := range d {
				st.Key[(h*d+j)*c+slot] = key[h*d+j]
				st.Value[(h*c+slot)*d+j] = value[h*d+j]
			}
		}
		st.Written[slot] = true
		return key, value, nil
	}
	pk, ok1 := out["present_key"+sfx]
	pv, ok2 := out["present_value"+sfx]
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("layer %d: no present_key%s/present_value%s output", st.Info.Layer, sfx, sfx)
	}
	copy(st.Key, pk.Floats())
	copy(st.Value, pv.Floats())
	st.Filled = min(st.Filled+1, c)
	for h := range kv {
		for j := range d {
			key[h*d+j] = st.Key[(h*d+j)*c+c-1]
			value[h*d+j] = st.Value[(h*c+c-1)*d+j]
		}
	}
	return key, value, nil
}
