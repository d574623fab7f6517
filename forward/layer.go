package forward

import (
	"fmt"
	"math"

	"sparkconv/kernels"
)

// ForwardLayer runs layer i of the prefill over x [T, H], the residual
// stream of positions 0..T-1, replacing x by the layer's output. It returns
// the layer's keys after RoPE and its values, each [T, KV, D]. obs, when not
// nil, sees every intermediate tensor of the layer (see Point).
func (m *Model) ForwardLayer(i int, x []float32, T int, obs Observer) (key, value []float32, err error) {
	if H := m.Cfg.HiddenSize; len(x) != T*H {
		return nil, nil, fmt.Errorf("layer %d: hidden state holds %d values, want T*H = %d*%d", i, len(x), T, H)
	}
	l, err := m.layer(i)
	if err != nil {
		return nil, nil, err
	}
	see := func(p Point, d []float32, cols int) {
		if obs != nil {
			obs.Observe(i, p, d, cols)
		}
	}
	key, value = m.attentionBlock(l, x, T, obs, see)
	m.mlpBlock(l, x, T, see)
	return key, value, nil
}

// attentionBlock adds the attention half of layer l to x [T, H].
func (m *Model) attentionBlock(l *Layer, x []float32, T int, obs Observer, see func(Point, []float32, int)) (key, value []float32) {
	c := m.Cfg
	H, QD, KVD, NH := c.HiddenSize, c.QDim(), c.KVDim(), c.NumHeads
	W := QD + 2*KVD
	see(HiddenIn, x, H)
	h := m.scratch("h", T*H)
	m.rmsNorm(h, x, l.InNorm)
	see(AttnNorm, h, H)
	qkv := m.scratch("qkv", T*W)
	l.matMul(actQKV, qkv, m.actIn(l.Act[actQKV], h, H), T, W, H)
	gate := m.scratch("gate", T*NH)
	l.matMul(actG, gate, m.actIn(l.Act[actG], h, H), T, NH, H)
	if obs != nil {
		see(Q, columnsInto(m.scratch("obs", T*QD), qkv, W, 0, QD), QD)
		see(K, columnsInto(m.scratch("obs", T*KVD), qkv, W, QD, KVD), KVD)
	}
	m.ropeRows(l.Index, qkv, T, 0)
	key, value = columns(qkv, W, QD, KVD), columns(qkv, W, QD+KVD, KVD)
	if obs != nil {
		see(V, value, KVD)
		see(QRoPE, columnsInto(m.scratch("obs", T*QD), qkv, W, 0, QD), QD)
		see(KRoPE, key, KVD)
	}
	att := m.scratch("att", T*QD)
	m.attention(l.Index, qkv, T, att, obs)
	see(Attn, att, QD)
	see(GateLogits, gate, NH)
	kernels.Sigmoid(gate)
	see(Gate, gate, NH)
	m.applyGate(att, gate, T)
	see(AttnGated, att, QD)
	o := m.scratch("o", T*H)
	l.matMul(actO, o, m.actIn(l.Act[actO], att, QD), T, H, QD)
	see(AttnOut, o, H)
	addInto(x, o)
	see(HiddenMid, x, H)
	return key, value
}

// mlpBlock adds the GEGLU half of layer l to x [T, H].
func (m *Model) mlpBlock(l *Layer, x []float32, T int, see func(Point, []float32, int)) {
	H, I := m.Cfg.HiddenSize, m.Cfg.IntermediateSize
	h := m.scratch("h", T*H)
	m.rmsNorm(h, x, l.PostNorm)
	see(MLPNorm, h, H)
	g, u := m.scratch("g", T*I), m.scratch("u", T*I)
	l.matMul(actGate, g, m.actIn(l.Act[actGate], h, H), T, I, H)
	l.matMul(actUp, u, m.actIn(l.Act[actUp], h, H), T, I, H)
	see(MLPGate, g, I)
	m.gelu(g)
	see(MLPGELU, g, I)
	see(MLPUp, u, I)
	mulInto(g, u)
	see(MLPAct, g, I)
	o := m.scratch("o", T*H)
	l.matMul(actDown, o, m.actIn(l.Act[actDown], g, I), T, H, I)
	see(MLPOut, o, H)
	addInto(x, o)
	see(HiddenOut, x, H)
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
