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

// Clone returns a copy of the cache that shares nothing with it.
func (st *CacheState) Clone() *CacheState {
	cp := *st
	cp.Key = append([]float32(nil), st.Key...)
	cp.Value = append([]float32(nil), st.Value...)
	cp.Written = append([]bool(nil), st.Written...)
	return &cp
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

// The prefill side of the host loop (docs/formats.md#prefill-graphs): a
// prompt goes through a prefill graph of N tokens in chunks at positions
// p = 0, N, 2N, ...; the last chunk holds v < N real tokens and N - v
// padding rows whose outputs the host drops. The graph sees the caches as
// they stand before the chunk, and the mask decides what each of its
// tokens sees.

// Chunk is one run of a prefill graph: positions Start..Start+N-1, of
// which the first Valid hold prompt tokens.
type Chunk struct{ Start, Valid int }

// Chunks splits a prompt of length tokens into chunks of n.
func Chunks(length, n int) []Chunk {
	var out []Chunk
	for p := 0; p < length; p += n {
		out = append(out, Chunk{Start: p, Valid: min(n, length-p)})
	}
	return out
}

// PrefillIDs returns the embed prefill graph's input_ids [1,n] for chunk
// ch of the prompt ids, padding rows holding token 0.
func PrefillIDs(ids []int, ch Chunk, n int) Tensor {
	v := make([]int64, n)
	for t := range ch.Valid {
		v[t] = int64(ids[ch.Start+t])
	}
	return I64Tensor([]int64{1, int64(n)}, v)
}

// slotPos is the position whose entry slot s holds when the cache holds
// the latest entries of positions 0..p-1 (the host's invariant), or -1.
func (st *CacheState) slotPos(s, p int) int {
	c := st.Info.CacheSlots
	if st.Info.Layout == LayoutRoll {
		if s < c-st.Filled {
			return -1
		}
		return p - (c - s)
	}
	if !st.Written[s] || s > p-1 {
		return -1
	}
	return s + (p-1-s)/c*c
}

// PrefillMask returns the additive mask [n, C+n] of a chunk of n tokens at
// positions p..p+n-1: token t (at q = p+t) sees a cached entry of
// position q' when q - q' <= C, and new token u when u <= t and t - u <=
// C. So a token sees exactly the C positions before it, as the decode step
// does, including the entries of the cache tensor that earlier tokens of
// the same chunk will overwrite. Padding rows follow the same rule; no
// real token sees them (they come last).
func (st *CacheState) PrefillMask(p, n int, maskValue float32) []float32 {
	c := st.Info.CacheSlots
	m := make([]float32, n*(c+n))
	pos := make([]int, c)
	for s := range pos {
		pos[s] = st.slotPos(s, p)
	}
	for t := range n {
		row := m[t*(c+n) : (t+1)*(c+n)]
		for s, q := range pos {
			if q < 0 || p+t-q > c {
				row[s] = maskValue
			}
		}
		for u := range n {
			if u > t || t-u > c {
				row[c+u] = maskValue
			}
		}
	}
	return m
}

// PrefillFeeds returns the inputs (except hidden_in) of a prefill graph of
// n tokens for the chunk at positions p..p+n-1: rope_cos/rope_sin [1,n,R/2]
// (row t for position p+t), the caches as they stand, the mask [1,1,n,C+n].
func (st *CacheState) PrefillFeeds(dt DType, p, n int, maskValue float32, sfx string) map[string]Tensor {
	li, kv, d := st.Info, int64(st.KV), int64(st.D)
	c, half, nn := int64(li.CacheSlots), li.RotaryDims/2, int64(n)
	cos, sin := make([]float32, 0, n*half), make([]float32, 0, n*half)
	for t := range n {
		cs, sn := RoPEInputs(p+t, li.RopeTheta, li.RotaryDims)
		cos, sin = append(cos, cs...), append(sin, sn...)
	}
	return map[string]Tensor{
		"rope_cos" + sfx:       FloatTensor(dt, []int64{1, nn, int64(half)}, cos),
		"rope_sin" + sfx:       FloatTensor(dt, []int64{1, nn, int64(half)}, sin),
		"past_key" + sfx:       FloatTensor(dt, []int64{1, kv, d, c}, st.Key),
		"past_value" + sfx:     FloatTensor(dt, []int64{1, kv, c, d}, st.Value),
		"attention_mask" + sfx: FloatTensor(dt, []int64{1, 1, nn, c + nn}, st.PrefillMask(p, n, maskValue)),
	}
}

// PrefillEntries returns the first v of a prefill graph's n new entries,
// new_key [1,KV,D,n] and new_value [1,KV,n,D], as [v, KV, D] each.
func PrefillEntries(out map[string]Tensor, kv, d, n, v int, sfx string) (key, value []float32, err error) {
	nk, ok1 := out["new_key"+sfx]
	nv, ok2 := out["new_value"+sfx]
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("no new_key%s/new_value%s output", sfx, sfx)
	}
	kf, vf := nk.Floats(), nv.Floats()
	if len(kf) != kv*d*n || len(vf) != kv*d*n {
		return nil, nil, fmt.Errorf("new_key%s/new_value%s hold %d/%d values, want %d", sfx, sfx, len(kf), len(vf), kv*d*n)
	}
	key, value = make([]float32, v*kv*d), make([]float32, v*kv*d)
	for t := range v {
		for h := range kv {
			for j := range d {
				key[(t*kv+h)*d+j] = kf[(h*d+j)*n+t]
				value[(t*kv+h)*d+j] = vf[(h*n+t)*d+j]
			}
		}
	}
	return key, value, nil
}

// Put stores the entries of positions p..p+v-1 (key and value [v, KV, D])
// as v decode steps would have: ring writes slot q mod C for each, roll
// shifts the cache by v (at most C) and writes the entries last.
func (st *CacheState) Put(p int, key, value []float32) {
	c, kv, d := st.Info.CacheSlots, st.KV, st.D
	w := kv * d
	v := len(key) / w
	if st.Info.Layout == LayoutRing {
		for t := range v {
			slot := (p + t) % c
			st.store(slot, key[t*w:(t+1)*w], value[t*w:(t+1)*w])
			st.Written[slot] = true
		}
		return
	}
	first := max(0, v-c) // only the last C entries survive
	keep := c - (v - first)
	for r := range kv * d {
		row := st.Key[r*c : (r+1)*c]
		copy(row, row[c-keep:])
	}
	for h := range kv {
		blk := st.Value[h*c*d : (h+1)*c*d]
		copy(blk, blk[(c-keep)*d:])
	}
	for t := first; t < v; t++ {
		st.store(keep+t-first, key[t*w:(t+1)*w], value[t*w:(t+1)*w])
	}
	st.Filled = min(st.Filled+v, c)
}

// store writes one entry (key and value [KV*D]) into slot.
func (st *CacheState) store(slot int, key, value []float32) {
	c, kv, d := st.Info.CacheSlots, st.KV, st.D
	for h := range kv {
		for j := range d {
			st.Key[(h*d+j)*c+slot] = key[h*d+j]
			st.Value[(h*c+slot)*d+j] = value[h*d+j]
		}
	}
}

// UpdatePrefill stores the first v new entries of a prefill graph's
// outputs for the chunk at p (Put) and returns them ([v, KV, D]).
func (st *CacheState) UpdatePrefill(out map[string]Tensor, p, n, v int, sfx string) (key, value []float32, err error) {
	key, value, err = PrefillEntries(out, st.KV, st.D, n, v, sfx)
	if err != nil {
		return nil, nil, fmt.Errorf("layer %d: %w", st.Info.Layer, err)
	}
	st.Put(p, key, value)
	return key, value, nil
}
