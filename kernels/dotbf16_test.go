package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestRoundBF16(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3F800000, 0x3F80}, // 1
		{0x3F808000, 0x3F80}, // tie, even stays
		{0x3F818000, 0x3F82}, // tie, odd rounds up
		{0x3F808001, 0x3F81}, // above the tie
		{0x3F807FFF, 0x3F80}, // below the tie
		{0x7F7FFFFF, 0x7F80}, // max float rounds to +inf
		{0x7F800000, 0x7F80}, // +inf
		{0xFF800000, 0xFF80}, // -inf
		{0x7F800001, 0x7FC0}, // signalling NaN: quieted
		{0xFFC12345, 0xFFC1}, // quiet NaN keeps its top bits
		{0x00000001, 0x0000}, // the smallest denormal
		{0x80018000, 0x8002}, // a denormal tie, odd: up
	} {
		if got := RoundBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("RoundBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	// Against float64 rounding to 8 significant bits, ties to even, for
	// normal values.
	r := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		f := float32(r.NormFloat64() * math.Exp(r.NormFloat64()*5))
		got := float64(math.Float32frombits(uint32(RoundBF16(f)) << 16))
		e := math.Ilogb(float64(f))
		q := math.Ldexp(math.RoundToEven(math.Ldexp(float64(f), 7-e)), e-7)
		if got != q {
			t.Fatalf("RoundBF16(%g) = %g, want %g", f, got, q)
		}
	}
}

// dotBF16Shapes are the shapes the bf16 GEMM is checked at: ragged tiles,
// odd k, several reduction blocks (k > 2*dotKCP).
var dotBF16Shapes = []struct{ m, n, k int }{
	{2, 1, 1}, {2, 7, 5}, {3, 3, 3}, {13, 17, 19}, {14, 32, 32}, {15, 33, 33},
	{28, 64, 100}, {29, 65, 385}, {16, 32, 384}, {100, 37, 513}, {47, 200, 31},
	{130, 150, 800}, {257, 96, 64}, {8, 1000, 40}, {30, 64, 1000},
}

// TestLinearNTBF16Bound pins the bf16 GEMM (the active kernel: portable
// here, see TestDotBF16Assembly for the assembly) to the float64 product
// of the bf16-rounded operands, and states its distance from the float32
// product of the unrounded ones.
func TestLinearNTBF16Bound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var worstRound float64
	for _, s := range dotBF16Shapes {
		a, w := randF32(r, s.m*s.k), randF32(r, s.n*s.k)
		bits := make([]uint16, len(w))
		for i, v := range w {
			bits[i] = RoundBF16(v)
		}
		rb := func(f float32) float64 { return float64(math.Float32frombits(uint32(RoundBF16(f)) << 16)) }
		want, mag := naiveGemm(s.m, s.n, s.k,
			func(i, p int) float64 { return rb(a[i*s.k+p]) },
			func(p, j int) float64 { return rb(w[j*s.k+p]) })
		exact, emag := naiveGemm(s.m, s.n, s.k,
			func(i, p int) float64 { return float64(a[i*s.k+p]) },
			func(p, j int) float64 { return float64(w[j*s.k+p]) })
		for _, wt := range []dotWeight{{f32: w, ld: s.k}, {bits: bits, ld: s.k}} {
			c := randF32(r, s.m*s.n) // must be overwritten
			gemmDotBF16(s.m, s.n, s.k, a, wt, c)
			// fp32 sums of exact products: a few k*eps of sum |a||b|.
			if e := maxScaledErr(c, want, mag); e > 1e-6*float64(s.k+8) {
				t.Errorf("m=%d n=%d k=%d: scaled error %.3g against the rounded operands' product", s.m, s.n, s.k, e)
			}
			worstRound = max(worstRound, maxScaledErr(c, exact, emag))
		}
	}
	// Rounding both operands to bf16 (8 significant bits) moves each
	// product by at most about 2^-8 of its size.
	if worstRound > 1.0/256 {
		t.Errorf("scaled error against the unrounded product %.3g, want <= 2^-8", worstRound)
	}
	t.Logf("largest error against the float32 operands' exact product: %.3g of sum |a||w|", worstRound)
}
