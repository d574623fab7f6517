package forward

import "math"

// ropeKey identifies one rotary table: the two layer types have their own.
type ropeKey struct {
	theta float64
	r     int
}

// ropeTable holds cos and sin of p * theta^(-2j/R) for positions 0..n-1 and
// j < R/2, row-major [n, R/2]. It grows to the positions actually used,
// never to max_position_embeddings.
type ropeTable struct {
	half     int
	cos, sin []float32
}

func (t *ropeTable) rows() int { return len(t.cos) / max(t.half, 1) }

// ropeFor returns layer i's table covering at least positions 0..n-1.
func (m *Model) ropeFor(layer, n int) *ropeTable {
	k := ropeKey{m.Cfg.RoPEFor(layer).Theta, m.Cfg.RotaryDims(layer)}
	t := m.ropeCache[k]
	if t == nil {
		t = &ropeTable{half: k.r / 2}
		m.ropeCache[k] = t
	}
	if have := t.rows(); have < n {
		cos := make([]float32, n*t.half)
		sin := make([]float32, n*t.half)
		copy(cos, t.cos)
		copy(sin, t.sin)
		for p := have; p < n; p++ {
			ropeAngles(cos[p*t.half:(p+1)*t.half], sin[p*t.half:(p+1)*t.half], p, k.theta, k.r)
		}
		t.cos, t.sin = cos, sin
	}
	return t
}

// ropeAngles fills cos/sin [R/2] for position p: angle_j = p * theta^(-2j/R),
// in float64, rounded to float32 once.
func ropeAngles(cos, sin []float32, p int, theta float64, r int) {
	for j := range cos {
		a := float64(p) * math.Pow(theta, -float64(2*j)/float64(r))
		s, c := math.Sincos(a)
		cos[j], sin[j] = float32(c), float32(s)
	}
}

// RoPE returns layer i's rope_cos and rope_sin for position pos, each R/2
// wide (R = rotary dims of the layer's type): the inputs of an exported
// layer graph, computed exactly as the forward uses them.
func (m *Model) RoPE(layer, pos int) (cos, sin []float32) {
	r := m.Cfg.RotaryDims(layer)
	cos, sin = make([]float32, r/2), make([]float32, r/2)
	ropeAngles(cos, sin, pos, m.Cfg.RoPEFor(layer).Theta, r)
	return cos, sin
}

// rotate applies NeoX rotate_half to the first 2*len(cos) dims of one head
// vector x: x1 = x[:R/2], x2 = x[R/2:R] become x1*cos - x2*sin and
// x2*cos + x1*sin; dims >= R pass through.
func rotate(x, cos, sin []float32) {
	h := len(cos)
	x1, x2 := x[:h:h], x[h:2*h:2*h]
	sin = sin[:h]
	for j, c := range cos {
		a, b := x1[j], x2[j]
		x1[j] = a*c - b*sin[j]
		x2[j] = b*c + a*sin[j]
	}
}
