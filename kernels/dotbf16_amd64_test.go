package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// needDotBF16 skips a test on a CPU without AVX512-BF16.
func needDotBF16(t *testing.T) {
	t.Helper()
	for _, f := range families["avx512bf16"].needs {
		if !CPU().Has(f) {
			t.Skip("skipped: this host has no AVX512-BF16")
		}
	}
}

// specialBF16 draws bf16 bits, one in eight a zero, denormal, huge or
// sign-flipped value, the rest normal values near 1.
func specialBF16(r *rand.Rand) uint16 {
	switch r.IntN(16) {
	case 0:
		return uint16(r.IntN(0x80)) | uint16(r.IntN(2))<<15 // zero or denormal
	case 1:
		return 0x3C00 | uint16(r.IntN(0x80)) // about 2^-7
	}
	return RoundBF16(float32(r.NormFloat64()))
}

// TestDotBF16Assembly pins the assembly micro-kernel to dotBF16Go bit for
// bit: VDPBF16PS's order (odd product, then even, each added in fp32),
// denormals read as zero.
func TestDotBF16Assembly(t *testing.T) {
	needDotBF16(t)
	r := rand.New(rand.NewPCG(9, 10))
	for _, kp := range []int{1, 2, 7, 16, 192} {
		a, b := make([]uint16, kp*dotMR*2), make([]uint16, kp*dotNR*2)
		for i := range a {
			a[i] = specialBF16(r)
		}
		for i := range b {
			b[i] = specialBF16(r)
		}
		ldc := dotNR + 3
		c0 := randF32(r, dotMR*ldc)
		got, want := slices.Clone(c0), slices.Clone(c0)
		dotBF16AVX512(kp, a, b, got, ldc)
		dotBF16Go(kp, a, b, want, ldc)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("kp=%d: c[%d] = %g (%#08x), portable %g (%#08x)", kp, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
}

// TestRoundTransBF16 pins the assembly rounding transpose to RoundBF16 on
// ties, infinities, NaNs and denormals.
func TestRoundTransBF16(t *testing.T) {
	needDotBF16(t)
	r := rand.New(rand.NewPCG(11, 12))
	const lds, ldd = 40, 18
	src := make([]float32, 16*lds)
	for i := range src {
		u := r.Uint32()
		switch r.IntN(4) {
		case 0:
			u = u&0xFFFF0000 | 0x8000 // a tie
		case 1:
			u |= 0x7F800000 // inf or NaN
		case 2:
			u &= 0x807FFFFF // zero or denormal
		}
		src[i] = math.Float32frombits(u)
	}
	dst := make([]uint16, 16*ldd*2)
	roundTransBF16AVX512(&src[0], lds, &dst[0], ldd, 0x7FFF)
	for i := range 16 {
		for r := range 16 {
			for e := range 2 {
				got, want := dst[(i*ldd+r)*2+e], RoundBF16(src[r*lds+2*i+e])
				if r == 15 {
					want = 0 // masked off
				}
				if got != want {
					t.Fatalf("pair %d row %d half %d: %#04x, want %#04x (from %#08x)", i, r, e, got, want, math.Float32bits(src[r*lds+2*i+e]))
				}
			}
		}
	}
}

// TestLinearNTAssembly pins the whole assembly GEMM (kernel and packers)
// to the portable one bit for bit, for float32 and bf16 weights.
func TestLinearNTAssembly(t *testing.T) {
	needDotBF16(t)
	r := rand.New(rand.NewPCG(13, 14))
	for _, s := range dotBF16Shapes {
		a, w := randF32(r, s.m*s.k), randF32(r, s.n*s.k)
		bits := make([]uint16, len(w))
		for i, v := range w {
			bits[i] = RoundBF16(v)
		}
		for _, wt := range []dotWeight{{f32: w, ld: s.k}, {bits: bits, ld: s.k}} {
			got, want := make([]float32, s.m*s.n), make([]float32, s.m*s.n)
			saved := dotKern
			dotKern = dotKernAVX512
			gemmDotBF16(s.m, s.n, s.k, a, wt, got)
			dotKern = dotKernel{fn: dotBF16Go, packA: packADotGo, packB: packBDotGo}
			gemmDotBF16(s.m, s.n, s.k, a, wt, want)
			dotKern = saved
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("m=%d n=%d k=%d bf16 weights %v: c[%d] = %g, portable %g", s.m, s.n, s.k, wt.bits != nil, i, got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkLinearNTBF16Dot is the avx512bf16 family's linear product at
// Spark's prefill shapes (T = 512), float32 weights (the calibration's
// dequantized codes, rounded as they are packed) and bf16 weights.
func BenchmarkLinearNTBF16Dot(b *testing.B) {
	if !CPU().Has("avx512_bf16") {
		b.Skip("skipped: this host has no AVX512-BF16")
	}
	saved := dotKern
	defer func() { dotKern = saved }()
	dotKern = dotKernAVX512
	for _, s := range benchShapes {
		for _, bf := range []bool{false, true} {
			b.Run(fmt.Sprintf("m%d_n%d_k%d_bf16w=%v", s.m, s.n, s.k, bf), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 1))
				x, w := randF32(r, s.m*s.k), randF32(r, s.n*s.k)
				wt := dotWeight{f32: w, ld: s.k}
				if bf {
					bits := make([]uint16, len(w))
					for i, v := range w {
						bits[i] = RoundBF16(v)
					}
					wt = dotWeight{bits: bits, ld: s.k}
				}
				c := make([]float32, s.m*s.n)
				gemmDotBF16(s.m, s.n, s.k, x, wt, c) // warm-up
				cpu0 := processCPU()
				for b.Loop() {
					gemmDotBF16(s.m, s.n, s.k, x, wt, c)
				}
				reportGFLOPs(b, 2*float64(s.m)*float64(s.n)*float64(s.k), cpu0)
			})
		}
	}
}

// TestLinearNTPackedDot is TestLinearNTPacked in the avx512bf16 family.
func TestLinearNTPackedDot(t *testing.T) {
	needDotBF16(t)
	saved, on := dotKern, bf16Linears
	defer func() { dotKern, bf16Linears = saved, on }()
	useDotBF16()
	checkPacked(t, 17)
}
