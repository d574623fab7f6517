package forward

import (
	"fmt"
	"math"

	"sparkconv/kernels"
	"sparkconv/spark"
)

// Layout is how a layer's KV cache is updated between decode steps
// (docs/formats.md#onnx-decode-step).
type Layout int

// The two cache layouts of the ONNX export contract.
const (
	// Ring: the new entry is written into slot pos mod C; slots never
	// written are masked. Order does not matter to softmax, and every key
	// carries its own rotary phase.
	Ring Layout = iota
	// Roll: the cache shifts by one slot (the oldest entry drops out) and
	// the new entry goes last; empty slots are at the front.
	Roll
)

// String is the layout's manifest name.
func (l Layout) String() string {
	if l == Roll {
		return "roll"
	}
	return "ring"
}

// AutoLayout is --layout auto: ring for sliding layers, roll for full ones.
func AutoLayout(c *spark.Config, layer int) Layout {
	if c.IsSliding(layer) {
		return Ring
	}
	return Roll
}

// LayerCache is one layer's KV cache exactly as an exported layer graph
// takes it, without the batch dimension. An entry is a key after RoPE and
// its value.
type LayerCache struct {
	Layout           Layout
	KVHeads, HeadDim int
	Slots            int       // C
	Key              []float32 // [KV, D, C]: past_key, head dim before slots
	Value            []float32 // [KV, C, D]: past_value
	Filled           []bool    // [C]: the slot holds an entry (else it is masked)
}

// NewLayerCache returns an empty cache of C slots. Key and Value start at
// zero; their contents behind unfilled slots never matter.
func NewLayerCache(layout Layout, kvHeads, headDim, slots int) *LayerCache {
	return &LayerCache{
		Layout: layout, KVHeads: kvHeads, HeadDim: headDim, Slots: slots,
		Key:    make([]float32, kvHeads*headDim*slots),
		Value:  make([]float32, kvHeads*slots*headDim),
		Filled: make([]bool, slots),
	}
}

// NewLayerCache returns an empty cache for layer i at the given context:
// C = spark.Config.CacheSlots (window-1 for sliding layers, context-1 for
// full ones).
func (m *Model) NewLayerCache(layer int, layout Layout, context int) *LayerCache {
	c := m.Cfg
	return NewLayerCache(layout, c.NumKVHeads, c.HeadDim, max(0, c.CacheSlots(layer, context)))
}

// Mask returns the graph's attention_mask [C+1]: 0 for a filled slot,
// maskValue for an empty one, and 0 last for the new token itself.
func (lc *LayerCache) Mask(maskValue float32) []float32 {
	m := make([]float32, lc.Slots+1)
	for s, f := range lc.Filled {
		if !f {
			m[s] = maskValue
		}
	}
	return m
}

// Update stores the entry of position pos: newK and newV are [KV, D] (as a
// ring graph's new_key / new_value). Ring writes slot pos mod C; Roll
// shifts every slot one to the front and writes the last (what a roll
// graph's present_key / present_value hold).
func (lc *LayerCache) Update(pos int, newK, newV []float32) {
	C, D := lc.Slots, lc.HeadDim
	if C == 0 {
		return
	}
	slot := C - 1
	if lc.Layout == Ring {
		slot = pos % C
	} else {
		copy(lc.Filled, lc.Filled[1:])
		for r := range lc.KVHeads * D {
			row := lc.Key[r*C : (r+1)*C]
			copy(row, row[1:])
		}
		for g := range lc.KVHeads {
			blk := lc.Value[g*C*D : (g+1)*C*D]
			copy(blk, blk[D:])
		}
	}
	lc.Filled[slot] = true
	for g := range lc.KVHeads {
		for d := range D {
			lc.Key[(g*D+d)*C+slot] = newK[g*D+d]
		}
		copy(lc.Value[(g*C+slot)*D:(g*C+slot+1)*D], newV[g*D:(g+1)*D])
	}
}

// Fill stores the entries of positions 0..T-1 as T decode steps would
// have: key and value are [T, KV, D], a prefill's Result.Key[i] and
// Result.Value[i]. A layer graph can then be run for position T.
func (lc *LayerCache) Fill(key, value []float32) {
	w := lc.KVHeads * lc.HeadDim
	T := len(key) / w
	// only the last C positions can survive in a C-slot cache
	for p := max(0, T-lc.Slots); p < T; p++ {
		lc.Update(p, key[p*w:(p+1)*w], value[p*w:(p+1)*w])
	}
}

func (m *Model) checkCache(i int, lc *LayerCache) error {
	c := m.Cfg
	C := lc.Slots
	if lc.KVHeads != c.NumKVHeads || lc.HeadDim != c.HeadDim || C < 0 ||
		len(lc.Key) != c.KVDim()*C || len(lc.Value) != c.KVDim()*C || len(lc.Filled) != C {
		return fmt.Errorf("layer %d: cache is %d kv heads x %d dims x %d slots (key %d, value %d, filled %d values), model has %d x %d",
			i, lc.KVHeads, lc.HeadDim, C, len(lc.Key), len(lc.Value), len(lc.Filled), c.NumKVHeads, c.HeadDim)
	}
	return nil
}

// DecodeLayer runs layer i for one new token at position pos against the
// cache as it stands (the entries of earlier positions), without changing
// it: one exported layer graph's step. hidden is the residual stream [H]
// entering the layer. It returns the residual leaving the layer [H] and
// the token's key after RoPE and value, each [KV*D] in [KV, D] order (the
// numbers of a ring graph's new_key [1,KV,D,1] and new_value [1,KV,1,D]).
// Follow it with cache.Update(pos, newK, newV) to advance the cache.
//
// The token sees itself and every filled slot: the cache decides the
// window (C = window-1 slots holding the latest entries for a sliding
// layer). Unfilled slots are skipped whatever they hold.
func (m *Model) DecodeLayer(i int, hidden []float32, pos int, cache *LayerCache) (out, newK, newV []float32, err error) {
	return m.DecodeLayers(i, hidden, []int{pos}, []*LayerCache{cache})
}

// DecodeLayers is DecodeLayer for B independent sequences at once: token b
// is at position pos[b] of its own sequence, whose layer-i cache is
// caches[b]; hidden, out are [B, H] and newK, newV [B, KV*D]. The linears
// run as one [B, in] x [out, in] product, so a batch of greedy decodes
// reads each weight once per step. B = 1 is exactly DecodeLayer.
func (m *Model) DecodeLayers(i int, hidden []float32, pos []int, caches []*LayerCache) (out, newK, newV []float32, err error) {
	B := len(pos)
	if H := m.Cfg.HiddenSize; B == 0 || len(hidden) != B*H || len(caches) != B {
		return nil, nil, nil, fmt.Errorf("layer %d: hidden holds %d values for %d positions and %d caches, want %d*%d", i, len(hidden), B, len(caches), B, H)
	}
	for _, lc := range caches {
		if err := m.checkCache(i, lc); err != nil {
			return nil, nil, nil, err
		}
	}
	l, err := m.layer(i)
	if err != nil {
		return nil, nil, nil, err
	}
	H := m.Cfg.HiddenSize
	out, newK, newV = m.decodeAttentionBlock(l, hidden, pos, caches)
	if err := checkFinite(i, HiddenMid, out, H); err != nil {
		return nil, nil, nil, err
	}
	m.decodeMLPBlock(l, out, B)
	if err := checkFinite(i, HiddenOut, out, H); err != nil {
		return nil, nil, nil, err
	}
	return out, newK, newV, nil
}

// decodeAttentionBlock returns hidden [B, H] plus the attention half of
// layer l for one token per sequence, and the tokens' keys and values.
func (m *Model) decodeAttentionBlock(l *Layer, hidden []float32, pos []int, caches []*LayerCache) (out, newK, newV []float32) {
	c := m.Cfg
	B := len(pos)
	H, QD, KVD, NH, D := c.HiddenSize, c.QDim(), c.KVDim(), c.NumHeads, c.HeadDim
	W := QD + 2*KVD
	h := make([]float32, B*H)
	m.rmsNorm(h, hidden, l.InNorm)
	qkv := make([]float32, B*W)
	l.matMul(actQKV, qkv, m.actIn(l.Act[actQKV], h, H), B, W, H)
	gate := make([]float32, B*NH)
	l.matMul(actG, gate, m.actIn(l.Act[actG], h, H), B, NH, H)
	kernels.Sigmoid(gate)
	newK, newV = make([]float32, B*KVD), make([]float32, B*KVD)
	att := make([]float32, B*QD)
	for b, p := range pos {
		row := qkv[b*W : (b+1)*W]
		cos, sin := m.RoPE(l.Index, p)
		for hd := range NH + c.NumKVHeads {
			rotate(row[hd*D:(hd+1)*D], cos, sin)
		}
		copy(newK[b*KVD:(b+1)*KVD], row[QD:QD+KVD])
		copy(newV[b*KVD:(b+1)*KVD], row[QD+KVD:])
		m.decodeAttention(row, caches[b], att[b*QD:(b+1)*QD])
	}
	m.applyGate(att, gate, B)
	out = make([]float32, B*H)
	l.matMul(actO, out, m.actIn(l.Act[actO], att, QD), B, H, QD)
	addInto(out, hidden)
	return out, newK, newV
}

// decodeMLPBlock adds the GEGLU half of layer l to x [B, H].
func (m *Model) decodeMLPBlock(l *Layer, x []float32, B int) {
	H, I := m.Cfg.HiddenSize, m.Cfg.IntermediateSize
	h := make([]float32, B*H)
	m.rmsNorm(h, x, l.PostNorm)
	g, u := make([]float32, B*I), make([]float32, B*I)
	l.matMul(actGate, g, m.actIn(l.Act[actGate], h, H), B, I, H)
	l.matMul(actUp, u, m.actIn(l.Act[actUp], h, H), B, I, H)
	m.gelu(g)
	mulInto(g, u)
	mlp := make([]float32, B*H)
	l.matMul(actDown, mlp, m.actIn(l.Act[actDown], g, I), B, H, I)
	addInto(x, mlp)
}

// decodeAttention attends one rotated token qkv [QD+2*KVD] over the filled
// slots of lc and itself, writing att [QD].
func (m *Model) decodeAttention(qkv []float32, lc *LayerCache, att []float32) {
	c := m.Cfg
	D, QD, KVD, C := c.HeadDim, c.QDim(), c.KVDim(), lc.Slots
	G := c.NumHeads / c.NumKVHeads
	scale := float32(1 / math.Sqrt(float64(D)))
	var slots []int
	for s, f := range lc.Filled {
		if f {
			slots = append(slots, s)
		}
	}
	all := make([]float32, C)
	p := make([]float32, len(slots)+1)
	for h := range c.NumHeads {
		g := h / G
		q := qkv[h*D : (h+1)*D]
		clear(all)
		for d, qd := range q {
			kernels.Axpy(qd, lc.Key[(g*D+d)*C:(g*D+d+1)*C], all)
		}
		for k, s := range slots {
			p[k] = all[s] * scale
		}
		p[len(slots)] = kernels.Dot(q, qkv[QD+g*D:QD+(g+1)*D]) * scale
		kernels.Softmax(p)
		o := att[h*D : (h+1)*D]
		clear(o)
		for k, s := range slots {
			kernels.Axpy(p[k], lc.Value[(g*C+s)*D:(g*C+s+1)*D], o)
		}
		kernels.Axpy(p[len(slots)], qkv[QD+KVD+g*D:QD+KVD+(g+1)*D], o)
	}
}

// Decoder runs the model token by token with one cache per layer, as a
// runtime runs the exported graphs.
type Decoder struct {
	m       *Model
	Context int // positions 0..Context-1 can be decoded
	Pos     int // position of the next token
	Caches  []*LayerCache
}

// NewDecoder returns a decoder with empty caches sized for context
// positions; layout picks each layer's layout (nil: AutoLayout).
func (m *Model) NewDecoder(context int, layout func(layer int) Layout) *Decoder {
	d := &Decoder{m: m, Context: context}
	for i := range m.Cfg.NumLayers {
		lay := AutoLayout(m.Cfg, i)
		if layout != nil {
			lay = layout(i)
		}
		d.Caches = append(d.Caches, m.NewLayerCache(i, lay, context))
	}
	return d
}

// StepResult is what one decode step computed for its position.
type StepResult struct {
	Logits []float32 // [V]
	// With dump: per layer, the residual entering it [H] and the token's
	// key after RoPE and value [KV*D]; the last residual and final norm [H].
	HiddenIn   [][]float32
	Key, Value [][]float32
	HiddenOut  []float32
	FinalNorm  []float32
}

// Step feeds token id at position d.Pos through every layer, updates the
// caches and advances d.Pos.
func (d *Decoder) Step(id int, dump bool) (*StepResult, error) {
	m := d.m
	if d.Pos >= d.Context {
		return nil, fmt.Errorf("decode: position %d is past the context of %d", d.Pos, d.Context)
	}
	x := make([]float32, m.Cfg.HiddenSize)
	if err := m.EmbedRow(x, id); err != nil {
		return nil, fmt.Errorf("decode position %d: %w", d.Pos, err)
	}
	r := &StepResult{}
	for i, lc := range d.Caches {
		out, k, v, err := m.DecodeLayer(i, x, d.Pos, lc)
		if err != nil {
			return nil, err
		}
		lc.Update(d.Pos, k, v)
		if dump {
			r.HiddenIn = append(r.HiddenIn, x)
			r.Key, r.Value = append(r.Key, k), append(r.Value, v)
		}
		x = out
	}
	fn := m.FinalNorm(x)
	var err error
	if r.Logits, err = m.Logits(fn, 1); err != nil {
		return nil, err
	}
	if dump {
		r.HiddenOut, r.FinalNorm = x, fn
	}
	d.Pos++
	return r, nil
}
