package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randBF16 returns n random bf16 values (normal, plus, with specials, a
// few signed zeros, subnormals and large magnitudes) and their float32
// widening.
func randBF16(r *rand.Rand, n int, specials bool) ([]uint16, []float32) {
	b := make([]uint16, n)
	for i := range b {
		b[i] = uint16(math.Float32bits(float32(r.NormFloat64())) >> 16)
		if !specials {
			continue
		}
		switch r.IntN(64) {
		case 0:
			b[i] = 0x8000 // -0
		case 1:
			b[i] = uint16(r.IntN(0x7f)) + 1 // subnormal
		case 2:
			b[i] = 0x7f00 | uint16(r.IntN(0x7f)) // ~1e38
		}
	}
	w := make([]float32, n)
	WidenBF16(w, b)
	return b, w
}

func bitsEqual(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %v, float32 path %v", what, i, got[i], want[i])
		}
	}
}

func TestWidenBF16(t *testing.T) {
	for _, c := range []struct {
		in   uint16
		want float32
	}{{0x3f80, 1}, {0xbf80, -1}, {0x4049, 3.140625}, {0, 0}, {0x7f80, float32(math.Inf(1))}, {0x0001, math.Float32frombits(0x10000)}} {
		var got [1]float32
		WidenBF16(got[:], []uint16{c.in})
		if math.Float32bits(got[0]) != math.Float32bits(c.want) {
			t.Errorf("WidenBF16(%#04x) = %v, want %v", c.in, got[0], c.want)
		}
	}
}

// TestWidenAbsMaxBF16 widens every bf16 bit pattern (NaNs included) in
// rows of every remainder modulo 16 against the scalar rule, and checks
// the absmax over the part the SIMD kernel took.
func TestWidenAbsMaxBF16(t *testing.T) {
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, n := range []int{1, 15, 16, 17, 31, 48, 1000, 1 << 16} {
		for off := 0; off+n <= len(all); off += max(n, len(all)/8) {
			src := all[off : off+n]
			dst := make([]float32, n)
			amax, done := WidenAbsMaxBF16(dst, src)
			if quantSIMD && done != n&^15 {
				t.Fatalf("n=%d: SIMD took %d values", n, done)
			}
			var want uint16
			for i, b := range src[:done] {
				if math.Float32bits(dst[i]) != uint32(b)<<16 {
					t.Fatalf("n=%d: [%d] %#04x widened to %#08x", n, i, b, math.Float32bits(dst[i]))
				}
				want = max(want, b&0x7fff)
			}
			if amax != want {
				t.Fatalf("n=%d: absmax %#04x, want %#04x", n, amax, want)
			}
			full := make([]float32, n)
			WidenBF16(full, src)
			for i, b := range src {
				if math.Float32bits(full[i]) != uint32(b)<<16 {
					t.Fatalf("WidenBF16 n=%d: [%d] %#04x widened to %#08x", n, i, b, math.Float32bits(full[i]))
				}
			}
		}
	}
}

// TestMatMulNTBF16 checks that bf16 weights give exactly the float32
// results of the widened weights, for every micro-kernel, with and without
// the assembly packers.
func TestMatMulNTBF16(t *testing.T) {
	run := func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		for _, s := range append(gemmShapes, struct{ m, n, k int }{40, 300, 2051}) {
			a := randF32(r, s.m*s.k)
			b, w := randBF16(r, s.n*s.k, true)
			got, want := randF32(r, s.m*s.n), make([]float32, s.m*s.n)
			MatMulNTBF16(got, a, b, s.m, s.n, s.k)
			MatMulNT(want, a, w, s.m, s.n, s.k)
			bitsEqual(t, "MatMulNTBF16", got, want)
		}
	}
	withKernels(t, run)
	t.Run("portable", func(t *testing.T) {
		defer usePortable()()
		run(t)
	})
}

// TestPackBBF16 compares the active bf16 packer with the portable one on
// panels with ragged columns, k tails and offsets.
func TestPackBBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const ld = 531
	b, _ := randBF16(r, 70*ld, true)
	for _, nr := range []int{4, 16, 32} {
		for _, c := range []struct{ p0, kb, j0, cols int }{{0, 256, 0, 64}, {3, 259, 5, 37}, {0, 7, 0, 16}, {8, 520, 17, 53}, {1, 9, 2, 16}} {
			got := make([]float32, c.kb*((c.cols+nr-1)/nr*nr))
			want := make([]float32, len(got))
			for i := range got {
				got[i], want[i] = float32(i), -1
			}
			packBBF16(got, b, ld, c.p0, c.kb, c.j0, c.cols, nr)
			packBBF16Go(want, b, ld, c.p0, c.kb, c.j0, c.cols, nr)
			bitsEqual(t, "packBBF16", got, want)
		}
	}
}

// TestMatVecNTExactOrder checks the float32 and bf16 matrix-vector kernels
// against the portable dotGo order, bit for bit.
func TestMatVecNTExactOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 3, 4, 5, 13, 700} {
		for _, k := range []int{1, 7, 8, 9, 63, 64, 100, 2048, 2051} {
			b, w := randBF16(r, n*k, true)
			x := randF32(r, k)
			want := make([]float32, n)
			matVecRowsGo(want, w, x, k)
			got := make([]float32, n)
			MatVecNT(got, w, x, n, k)
			if !isAVX512() {
				bitsEqual(t, "MatVecNT", got, want)
			}
			// bf16 weights give the float32 path's sums on every family.
			MatVecNT(want, w, x, n, k)
			MatVecNTBF16(got, b, x, n, k)
			bitsEqual(t, "MatVecNTBF16", got, want)
			y1 := make([]float32, 1)
			MatMulNTBF16(y1, x, b[:k], 1, 1, k)
			bitsEqual(t, "MatMulNTBF16 m=1", y1, want[:1])
		}
	}
}

// TestMatVecRowAlone checks, on every family, that a row's matrix-vector
// sum does not depend on how many rows share the call or where the row
// sits: the decode of one sequence alone and in a batch must agree bit for
// bit.
func TestMatVecRowAlone(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	run := func(t *testing.T) {
		for _, n := range []int{1, 2, 3, 5, 7, 9} {
			for _, k := range []int{15, 16, 17, 48, 63, 64, 100, 577} {
				b, w := randBF16(r, n*k, true)
				x := randF32(r, k)
				all, allBF := make([]float32, n), make([]float32, n)
				MatVecNT(all, w, x, n, k)
				MatVecNTBF16(allBF, b, x, n, k)
				for j := range n {
					one := make([]float32, 1)
					MatVecNT(one, w[j*k:(j+1)*k], x, 1, k)
					bitsEqual(t, fmt.Sprintf("MatVecNT n=%d k=%d row %d", n, k, j), one, all[j:j+1])
					MatVecNTBF16(one, b[j*k:(j+1)*k], x, 1, k)
					bitsEqual(t, fmt.Sprintf("MatVecNTBF16 n=%d k=%d row %d", n, k, j), one, allBF[j:j+1])
					if d := Dot(w[j*k:(j+1)*k], x); math.Float32bits(d) != math.Float32bits(all[j]) {
						t.Errorf("Dot n=%d k=%d row %d = %v, MatVecNT %v", n, k, j, d, all[j])
					}
				}
			}
		}
	}
	t.Run(Active(), run)
	t.Run("portable", func(t *testing.T) {
		defer usePortable()()
		run(t)
	})
}

// isAVX512 reports whether the AVX-512 family is active (its float32
// matrix-vector kernel sums in its own order).
func isAVX512() bool { return sgemmKern.name == "avx512-14x32" }

// TestPackBTrans compares each kernel's float32 B packer with the
// portable one on transposed and normal operands.
func TestPackBTrans(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const ld = 531
	data := randF32(r, 300*ld)
	for _, kern := range sgemmAll {
		for _, trans := range []bool{true, false} {
			for _, c := range []struct{ p0, kb, j0, cols int }{{0, 256, 0, 64}, {3, 259, 5, 37}, {0, 7, 0, 16}, {8, 20, 17, 53}, {1, 9, 2, 16}} {
				nr := kern.nr
				got := make([]float32, c.kb*((c.cols+nr-1)/nr*nr))
				want := make([]float32, len(got))
				op := operand[float32]{data, ld, trans}
				kern.packB2(got, op, c.p0, c.kb, c.j0, c.cols)
				packB(want, op, c.p0, c.kb, c.j0, c.cols, nr)
				bitsEqual(t, kern.name+" packB", got, want)
			}
		}
	}
}
