package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLinearNTPacked: a weight packed once gives LinearNT's results bit
// for bit, float32 and bf16 weights, with every float32 micro-kernel (and
// with the bf16 dot kernel, see TestLinearNTPackedDot).
func TestLinearNTPacked(t *testing.T) {
	withKernels(t, func(t *testing.T) { checkPacked(t, 15) })
}

func checkPacked(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 16))
	for _, s := range dotBF16Shapes {
		if s.m < 2 {
			continue
		}
		a, w := randF32(r, s.m*s.k), randF32(r, s.n*s.k)
		bits := make([]uint16, len(w))
		for i, v := range w {
			bits[i] = RoundBF16(v)
		}
		want, got := make([]float32, s.m*s.n), randF32(r, s.m*s.n)
		LinearNT(want, a, w, s.m, s.n, s.k)
		LinearNTPacked(got, a, PackNT(w, s.n, s.k), s.m)
		sameBits(t, "float32", s.m, s.n, s.k, got, want)
		LinearNTBF16(want, a, bits, s.m, s.n, s.k)
		LinearNTPacked(got, a, PackNTBF16(bits, s.n, s.k), s.m)
		sameBits(t, "bf16", s.m, s.n, s.k, got, want)
	}
}

func sameBits(t *testing.T, what string, m, n, k int, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s weights m=%d n=%d k=%d: c[%d] = %g packed, %g unpacked", what, m, n, k, i, got[i], want[i])
		}
	}
}
