package quant

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"sparkconv/kernels"
)

// bf16Row makes a row of bf16 bits of length n: N(0, 0.02) values, with
// some exact zeros, negative zeros, outliers, and values that sit exactly
// on, or one bf16 step beside, a half-integer multiple of the scale the
// row gets, which is where rounding rules differ.
func bf16Row(r *rand.Rand, n int) []uint16 {
	row := make([]uint16, n)
	for i := range row {
		row[i] = f32ToBF16(float32(r.NormFloat64() * 0.02))
	}
	if n > 40 {
		row[3] = 0
		row[5] = 0x8000
		row[11] = f32ToBF16(float32(0.02 * 40 * (r.Float64() - 0.5)))
	}
	s := Int8Absmax(widenBF16(row), ScaleBF16).Scale
	for i := 13; i < n; i += 7 {
		k := float32(r.IntN(255) - 127)
		v := f32ToBF16(float32((k + 0.5) * s))
		row[i] = v + uint16(r.IntN(3)) - 1
	}
	return row
}

func widenBF16(row []uint16) []float32 {
	w := make([]float32, len(row))
	for i, b := range row {
		w[i] = bf16ToF32(b)
	}
	return w
}

// TestInt8RowBF16 checks the fused bf16 kernel (SIMD on this CPU when it
// has AVX2) against the portable kernel on widened values: codes and every
// statistic bit for bit, for lengths that leave every kind of remainder.
func TestInt8RowBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 15, 16, 63, 64, 65, 128, 200, 2048, 6656, 6656 + 17} {
		for rep := range 20 {
			row := bf16Row(r, n)
			w := widenBF16(row)
			s := Int8Absmax(w, ScaleBF16).Scale
			if rep%5 == 4 {
				s = ScaleF16.Round(s * 0.75) // codes past the clamp
			}
			want := make([]int8, n)
			got := make([]int8, n)
			ws := int8Kernel(want, w, s)
			gs := int8RowBF16(got, row, s)
			if !slices.Equal(got, want) {
				i := 0
				for i = range got {
					if got[i] != want[i] {
						break
					}
				}
				t.Fatalf("n=%d rep %d: code %d is %d, want %d (w=%g s=%g)", n, rep, i, got[i], want[i], w[i], s)
			}
			if gs != ws {
				t.Fatalf("n=%d rep %d: stats %+v, want %+v", n, rep, gs, ws)
			}
		}
	}
}

// TestInt8KernelExact checks that both int8 paths equal rint(w/s) with the
// division done in float64 and rounded to float32 (the exact float32
// quotient), clamped: compressed-tensors' rule, independently of either
// kernel's shortcut.
func TestInt8KernelExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	row := bf16Row(r, 1<<16)
	w := widenBF16(row)
	s := Int8Absmax(w, ScaleBF16).Scale
	got := make([]int8, len(w))
	int8RowBF16(got, row, s)
	for i, x := range w {
		q := math.RoundToEven(float64(float32(float64(x) / float64(s))))
		q = min(max(q, -128), 127)
		if int8(q) != got[i] {
			t.Fatalf("w=%g s=%g: code %d, want %v", x, s, got[i], q)
		}
	}
}

func TestQuantizeInt8Scaled(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	n, k := 37, 6656+64
	bits := make([]uint16, 0, n*k)
	for range n {
		bits = append(bits, bf16Row(r, k)...)
	}
	var results []Int8Result
	defer func() { // bf16 (fused SIMD) and widened float32 (portable) agree
		a, b := results[0], results[1]
		if !slices.Equal(a.Codes, b.Codes) || !slices.Equal(a.Scales, b.Scales) || a.Stats != b.Stats {
			t.Errorf("bf16 and float32 inputs quantize differently (stats %+v vs %+v)", a.Stats, b.Stats)
		}
	}()
	for _, m := range []Matrix{BF16Matrix(n, k, bits), F32Matrix(n, k, widenBF16(bits))} {
		var want, got Int8Result
		if err := QuantizeInt8(&want, m, ScaleBF16); err != nil {
			t.Fatal(err)
		}
		scales, err := Int8Scales(m, ScaleBF16)
		if err != nil {
			t.Fatal(err)
		}
		if err := QuantizeInt8Scaled(&got, m, scales); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Codes, want.Codes) || !slices.Equal(got.Scales, want.Scales) || got.Stats != want.Stats {
			t.Fatalf("bf16=%v: QuantizeInt8Scaled differs from QuantizeInt8 (stats %+v vs %+v)", m.BF16 != nil, got.Stats, want.Stats)
		}
		results = append(results, want)
	}
	if err := QuantizeInt8Scaled(&Int8Result{}, BF16Matrix(n, k, bits), make([]float32, 3)); err == nil {
		t.Error("wrong scale count accepted")
	}
}

func TestAbsMaxBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{64, 128, 4096, 6656} {
		row := bf16Row(r, n)
		row[r.IntN(n)] = 0xff80 // -Inf: the mask keeps the exponent
		var want uint16
		for _, b := range row[:n&^63] {
			want = max(want, b&0x7fff)
		}
		got, done := kernels.AbsMaxBF16(row)
		if done != 0 && (done != n&^63 || got != want) {
			t.Fatalf("n=%d: %#x over %d, want %#x over %d", n, got, done, want, n&^63)
		}
	}
}

func BenchmarkInt8RowBF16(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	row := bf16Row(r, 1<<20)
	w := widenBF16(row)
	s := Int8Absmax(w, ScaleBF16).Scale
	dst := make([]int8, len(row))
	b.Run("fused", func(b *testing.B) {
		b.SetBytes(int64(2 * len(row)))
		for b.Loop() {
			int8RowBF16(dst, row, s)
		}
	})
	b.Run("portable", func(b *testing.B) {
		b.SetBytes(int64(2 * len(row)))
		buf := make([]float32, len(row))
		for b.Loop() {
			for i, v := range row {
				buf[i] = bf16ToF32(v)
			}
			int8Kernel(dst, buf, s)
		}
	})
}
