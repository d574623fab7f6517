package forward

import (
	"fmt"
	"math"

	"sparkconv/kernels"
)

// ForwardLayer runs layer i of the prefill over x [T, H], the residual
// stream of positions 0..T-1, replacing x by the layer's output. It returns
// the layer's keys after RoPE and its values, each [T, KV, D]. obs, when not
// nil, sees every intermediate tensor of the layer (see Point). It is the
// composition of the layer's Stages, in order. A NaN or infinity computed
// at any stage (an overflow) stops it with a NonFiniteError naming the
// layer and the point.
func (m *Model) ForwardLayer(i int, x []float32, T int, obs Observer) (key, value []float32, err error) {
	s, err := m.Stages(i, obs)
	if err != nil {
		return nil, nil, err
	}
	if err := s.check(x, T); err != nil {
		return nil, nil, err
	}
	c := m.Cfg
	H, QD, I := c.HiddenSize, c.QDim(), c.IntermediateSize
	h := m.scratch("h", T*H)
	s.InputNorm(h, x, T)
	att := m.scratch("att", T*QD)
	key, value = s.Attention(att, h, T)
	if err := firstNonFinite(i, pointData{AttnNorm, h[:T*H], H}, pointData{AttnGated, att[:T*QD], QD}); err != nil {
		return nil, nil, err
	}
	s.AttnOut(x, att, T)
	if err := firstNonFinite(i, pointData{AttnOut, m.bufs["o"][:T*H], H}, pointData{HiddenMid, x[:T*H], H}); err != nil {
		return nil, nil, err
	}
	s.PostNorm(h, x, T)
	act := m.scratch("g", T*I)
	s.MLPAct(act, h, T)
	if err := firstNonFinite(i, pointData{MLPNorm, h[:T*H], H}, pointData{MLPAct, act[:T*I], I}); err != nil {
		return nil, nil, err
	}
	s.MLPOut(x, act, T)
	if err := firstNonFinite(i, pointData{MLPOut, m.bufs["o"][:T*H], H}, pointData{HiddenOut, x[:T*H], H}); err != nil {
		return nil, nil, err
	}
	return key, value, nil
}

// Stages runs one layer a stage at a time, for a caller that needs every
// chunk's output of one stage before the next stage may run (GPTQ's
// true-sequential calibration: a linear is solved from its input over all
// chunks, then the next stage reads its quantized output). Running the
// six stages in order over one chunk is exactly ForwardLayer. What a stage
// hands the next is the caller's: h [T, H] (a norm's output), att [T, QD]
// (the gated attention), act [T, I] (the GEGLU product) and the residual
// x [T, H]; the stages' own work buffers are the model's, reused. A Stages
// reads the layer's weights as they are when each stage runs (so a caller
// may replace them between stages) and is valid until another layer is
// loaded.
type Stages struct {
	m   *Model
	l   *Layer
	obs Observer
}

// Stages returns layer i's stages; obs, when not nil, sees the points each
// stage computes.
func (m *Model) Stages(i int, obs Observer) (*Stages, error) {
	l, err := m.layer(i)
	if err != nil {
		return nil, err
	}
	return &Stages{m: m, l: l, obs: obs}, nil
}

func (s *Stages) check(x []float32, T int) error {
	if H := s.m.Cfg.HiddenSize; len(x) != T*H {
		return fmt.Errorf("layer %d: hidden state holds %d values, want T*H = %d*%d", s.l.Index, len(x), T, H)
	}
	return nil
}

func (s *Stages) see(p Point, d []float32, cols int) {
	if s.obs != nil {
		s.obs.Observe(s.l.Index, p, d, cols)
	}
}

// InputNorm writes the input norm of the residual x [T, H] into h [T, H]
// (HiddenIn, AttnNorm): the input of q_k_v_proj and g_proj.
func (s *Stages) InputNorm(h, x []float32, T int) {
	H := s.m.Cfg.HiddenSize
	s.see(HiddenIn, x, H)
	s.m.rmsNorm(h[:T*H], x[:T*H], s.l.InNorm)
	s.see(AttnNorm, h[:T*H], H)
}

// Attention writes the gated attention of h [T, H] (InputNorm's output)
// into att [T, QD] (Q .. AttnGated): the input of o_proj. It returns the
// keys after RoPE and the values, each [T, KVD].
func (s *Stages) Attention(att, h []float32, T int) (key, value []float32) {
	m, l, obs := s.m, s.l, s.obs
	c := m.Cfg
	H, QD, KVD, NH := c.HiddenSize, c.QDim(), c.KVDim(), c.NumHeads
	W := QD + 2*KVD
	h, att = h[:T*H], att[:T*QD]
	qkv := m.scratch("qkv", T*W)
	l.matMul(actQKV, qkv, m.actIn(l.Act[actQKV], h, H), T, W, H)
	gate := m.scratch("gate", T*NH)
	l.matMul(actG, gate, m.actIn(l.Act[actG], h, H), T, NH, H)
	if obs != nil {
		s.see(Q, columnsInto(m.scratch("obs", T*QD), qkv, W, 0, QD), QD)
		s.see(K, columnsInto(m.scratch("obs", T*KVD), qkv, W, QD, KVD), KVD)
	}
	m.ropeRows(l.Index, qkv, T, 0)
	key, value = columns(qkv, W, QD, KVD), columns(qkv, W, QD+KVD, KVD)
	if obs != nil {
		s.see(V, value, KVD)
		s.see(QRoPE, columnsInto(m.scratch("obs", T*QD), qkv, W, 0, QD), QD)
		s.see(KRoPE, key, KVD)
	}
	m.attention(l.Index, qkv, T, att, obs)
	s.see(Attn, att, QD)
	s.see(GateLogits, gate, NH)
	kernels.Sigmoid(gate)
	s.see(Gate, gate, NH)
	m.applyGate(att, gate, T)
	s.see(AttnGated, att, QD)
	return key, value
}

// AttnOut adds o_proj of att [T, QD] to the residual x [T, H] (AttnOut,
// HiddenMid).
func (s *Stages) AttnOut(x, att []float32, T int) {
	m, l := s.m, s.l
	H, QD := m.Cfg.HiddenSize, m.Cfg.QDim()
	att = att[:T*QD]
	o := m.scratch("o", T*H)
	l.matMul(actO, o, m.actIn(l.Act[actO], att, QD), T, H, QD)
	s.see(AttnOut, o, H)
	addInto(x[:T*H], o)
	s.see(HiddenMid, x[:T*H], H)
}

// PostNorm writes the post-attention norm of the residual x [T, H] into
// h [T, H] (MLPNorm): the input of gate_proj and up_proj.
func (s *Stages) PostNorm(h, x []float32, T int) {
	H := s.m.Cfg.HiddenSize
	s.m.rmsNorm(h[:T*H], x[:T*H], s.l.PostNorm)
	s.see(MLPNorm, h[:T*H], H)
}

// MLPAct writes gelu(gate_proj(h)) * up_proj(h) of h [T, H] (PostNorm's
// output) into act [T, I] (MLPGate .. MLPAct): the input of down_proj.
func (s *Stages) MLPAct(act, h []float32, T int) {
	m, l := s.m, s.l
	H, I := m.Cfg.HiddenSize, m.Cfg.IntermediateSize
	h, g := h[:T*H], act[:T*I]
	u := m.scratch("u", T*I)
	l.matMul(actGate, g, m.actIn(l.Act[actGate], h, H), T, I, H)
	l.matMul(actUp, u, m.actIn(l.Act[actUp], h, H), T, I, H)
	s.see(MLPGate, g, I)
	m.gelu(g)
	s.see(MLPGELU, g, I)
	s.see(MLPUp, u, I)
	mulInto(g, u)
	s.see(MLPAct, g, I)
}

// MLPOut adds down_proj of act [T, I] to the residual x [T, H] (MLPOut,
// HiddenOut).
func (s *Stages) MLPOut(x, act []float32, T int) {
	m, l := s.m, s.l
	H, I := m.Cfg.HiddenSize, m.Cfg.IntermediateSize
	act = act[:T*I]
	o := m.scratch("o", T*H)
	l.matMul(actDown, o, m.actIn(l.Act[actDown], act, I), T, H, I)
	s.see(MLPOut, o, H)
	addInto(x[:T*H], o)
	s.see(HiddenOut, x[:T*H], H)
}

// scratch returns the named work buffer with n values (contents
// unspecified), reused from call to call: fresh multi-MB buffers per layer
// cost page faults that showed up as 10% of a full-size layer.
func (m *Model) scratch(name string, n int) []float32 {
	b := m.bufs[name]
	if cap(b) < n {
		b = make([]float32, n)
		m.bufs[name] = b
	}
	return b[:n]
}

// columns copies columns [c0, c0+n) of a row-major matrix with w columns.
func columns(a []float32, w, c0, n int) []float32 {
	return columnsInto(make([]float32, len(a)/w*n), a, w, c0, n)
}

// columnsInto is columns into out (len(a)/w*n values).
func columnsInto(out, a []float32, w, c0, n int) []float32 {
	for r := range len(a) / w {
		copy(out[r*n:(r+1)*n], a[r*w+c0:r*w+c0+n])
	}
	return out
}

// ropeRows rotates the q and k heads of qkv rows [T, QD+2*KVD] holding
// positions pos0..pos0+T-1 with layer i's table.
func (m *Model) ropeRows(i int, qkv []float32, T, pos0 int) {
	c := m.Cfg
	D, QD := c.HeadDim, c.QDim()
	W := QD + 2*c.KVDim()
	tab := m.ropeFor(i, pos0+T)
	heads := c.NumHeads + c.NumKVHeads // q heads then k heads, contiguous
	kernels.Parallel(T, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			p := pos0 + t
			cos, sin := tab.cos[p*tab.half:(p+1)*tab.half], tab.sin[p*tab.half:(p+1)*tab.half]
			row := qkv[t*W : t*W+heads*D]
			for h := range heads {
				rotate(row[h*D:(h+1)*D], cos, sin)
			}
		}
	})
}

// applyGate scales each head's attention output by its gate: att [T, QD],
// gate [T, heads].
func (m *Model) applyGate(att, gate []float32, T int) {
	D, NH := m.Cfg.HeadDim, m.Cfg.NumHeads
	for t := range T {
		for h := range NH {
			g := gate[t*NH+h]
			v := att[(t*NH+h)*D : (t*NH+h+1)*D]
			for d := range v {
				v[d] *= g
			}
		}
	}
}

// addInto computes x += y on all cores.
func addInto(x, y []float32) {
	const grain = 1 << 15
	kernels.Parallel((len(x)+grain-1)/grain, func(lo, hi int) {
		a, b := lo*grain, min(hi*grain, len(x))
		xs, ys := x[a:b], y[a:b]
		for k := range xs {
			xs[k] += ys[k]
		}
	})
}

// mulInto computes x *= y on all cores.
func mulInto(x, y []float32) {
	const grain = 1 << 15
	kernels.Parallel((len(x)+grain-1)/grain, func(lo, hi int) {
		a, b := lo*grain, min(hi*grain, len(x))
		kernels.Mul(x[a:b], y[a:b])
	})
}

// queryRows is how many stacked query rows (positions x query heads of one
// KV head) one attention block holds.
const queryRows = 256

// attention computes softmax(q.k/sqrt(D) + mask) @ v for every position and
// query head of qkv [T, QD+2*KVD] (q and k already rotated) into att
// [T, QD]. Per KV head g, the heads g*G..g*G+G-1 (G = heads/KV) are stacked
// as rows t*G+j of one query block, multiplied by the keys the block can
// see (causal; sliding layers start at the window of the block's first
// query), masked per row, soft-maxed and multiplied by the values.
func (m *Model) attention(i int, qkv []float32, T int, att []float32, obs Observer) {
	c := m.Cfg
	D, QD, KVD, KV := c.HeadDim, c.QDim(), c.KVDim(), c.NumKVHeads
	G := c.NumHeads / KV
	W := QD + 2*KVD
	window := T
	if c.IsSliding(i) {
		window = c.SlidingWindow
	}
	scale := float32(1 / math.Sqrt(float64(D)))
	bq := max(1, queryRows/G)
	kg, vg := m.scratch("kg", T*D), m.scratch("vg", T*D)
	qb, ob := m.scratch("qb", bq*G*D), m.scratch("ob", bq*G*D)
	s := m.scratch("s", bq*G*min(T, bq+window-1))
	ragged := m.bufs["ragged"][:0]
	defer func() { m.bufs["ragged"] = ragged }()
	for g := range KV {
		for t := range T {
			copy(kg[t*D:(t+1)*D], qkv[t*W+QD+g*D:t*W+QD+(g+1)*D])
			copy(vg[t*D:(t+1)*D], qkv[t*W+QD+KVD+g*D:t*W+QD+KVD+(g+1)*D])
		}
		for t0 := 0; t0 < T; t0 += bq {
			t1 := min(t0+bq, T)
			nq := (t1 - t0) * G
			klo := max(0, t0-window+1)
			nk := t1 - klo
			for t := t0; t < t1; t++ {
				copy(qb[(t-t0)*G*D:(t-t0+1)*G*D], qkv[t*W+g*G*D:t*W+(g+1)*G*D])
			}
			sb := s[:nq*nk]
			kernels.MatMulNT(sb, qb[:nq*D], kg[klo*D:t1*D], nq, nk, D)
			visible := func(r int) (lo, hi int) {
				t := t0 + r/G
				return max(klo, t-window+1) - klo, t + 1 - klo
			}
			kernels.Parallel(nq, func(lo, hi int) {
				for r := lo; r < hi; r++ {
					row := sb[r*nk : (r+1)*nk]
					a, b := visible(r)
					clear(row[:a])
					clear(row[b:])
					for k := a; k < b; k++ {
						row[k] *= scale
					}
					if obs == nil {
						kernels.Softmax(row[a:b])
					}
				}
			})
			if obs != nil {
				ragged = observeRagged(obs, i, Scores, sb, nq, nk, visible, ragged)
				kernels.Parallel(nq, func(lo, hi int) {
					for r := lo; r < hi; r++ {
						a, b := visible(r)
						kernels.Softmax(sb[r*nk+a : r*nk+b])
					}
				})
				ragged = observeRagged(obs, i, Probs, sb, nq, nk, visible, ragged)
			}
			kernels.MatMulNN(ob[:nq*D], sb, vg[klo*D:t1*D], nq, D, nk)
			for t := t0; t < t1; t++ {
				copy(att[t*QD+g*G*D:t*QD+(g+1)*G*D], ob[(t-t0)*G*D:(t-t0+1)*G*D])
			}
		}
	}
}

// observeRagged hands obs the visible entries of the block's rows.
func observeRagged(obs Observer, layer int, p Point, sb []float32, nq, nk int, visible func(int) (int, int), buf []float32) []float32 {
	buf = buf[:0]
	for r := range nq {
		a, b := visible(r)
		buf = append(buf, sb[r*nk+a:r*nk+b]...)
	}
	obs.Observe(layer, p, buf, len(buf))
	return buf
}
