package kernels

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// geluCheck runs GELUErf over xs (in place on a copy) and compares every
// value with geluGo, bit for bit, naming the first few that differ.
func geluCheck(t *testing.T, xs []float32) {
	t.Helper()
	got := append([]float32(nil), xs...)
	GELUErf(got)
	bad := 0
	for i, v := range xs {
		if w := geluGo(v); math.Float32bits(got[i]) != math.Float32bits(w) {
			if bad++; bad <= 5 {
				t.Errorf("GELUErf(%v) (bits %#08x) = %v (%#08x), want %v (%#08x)", v, math.Float32bits(v),
					got[i], math.Float32bits(got[i]), w, math.Float32bits(w))
			}
		}
	}
	if bad > 5 {
		t.Errorf("%d of %d values differ", bad, len(xs))
	}
}

// TestGELUErfExact checks the active GELU kernel against the Go
// expression on a sweep of float32 bit patterns (every 1021st, both
// signs, all exponents), on the values around each of math.Erf's range
// boundaries (x = f/sqrt2 at 2**-28, 0.84375, 1.25, 1/0.35 and 6), and on
// blocks mixing NaN, infinities, zeros and subnormals at every position.
func TestGELUErfExact(t *testing.T) {
	var xs []float32
	for b := uint64(0); b < 1<<32; b += 1021 {
		xs = append(xs, math.Float32frombits(uint32(b)))
	}
	for _, x := range []float64{1.0 / (1 << 28), 0.84375, 1.25, 1 / 0.35, 6} {
		for _, s := range []float64{1, -1} {
			c := math.Float32bits(float32(s * x * math.Sqrt2))
			for d := -64; d <= 64; d++ {
				xs = append(xs, math.Float32frombits(uint32(int64(c)+int64(d))))
			}
		}
	}
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7FC00001), math.Float32frombits(0xFF800001), math.Float32frombits(1), math.Float32frombits(0x807FFFFF),
		math.MaxFloat32, -math.MaxFloat32, 1, -1, 3, -3, 10, -10, 20, -20}
	for lead := range 9 { // each special value at each position of a block
		for _, v := range special {
			block := make([]float32, 17)
			for i := range block {
				block[i] = float32(i-8) * 0.37
			}
			block[lead] = v
			xs = append(xs, block...)
		}
	}
	t.Run(Active(), func(t *testing.T) { geluCheck(t, xs) })
	for n := range 20 { // every length's tail
		geluCheck(t, xs[1000:1000+n])
	}
}

// TestGELUErfAll compares every one of the 2**32 float32 values, with
// SPARKCONV_GELU_ALL=1 (about a minute on two cores).
func TestGELUErfAll(t *testing.T) {
	if os.Getenv("SPARKCONV_GELU_ALL") != "1" {
		t.Skip("set SPARKCONV_GELU_ALL=1 to compare all 2**32 float32 values")
	}
	const chunk = 1 << 20
	bad := make([]int, 1<<32/chunk)
	Parallel(len(bad), func(lo, hi int) {
		xs, got := make([]float32, chunk), make([]float32, chunk)
		for c := lo; c < hi; c++ {
			for i := range xs {
				xs[i] = math.Float32frombits(uint32(c*chunk + i))
			}
			copy(got, xs)
			GELUErf(got)
			for i, v := range xs {
				if math.Float32bits(got[i]) != math.Float32bits(geluGo(v)) {
					bad[c]++
				}
			}
		}
	})
	total := 0
	for _, b := range bad {
		total += b
	}
	if total > 0 {
		t.Fatalf("%d of 2**32 float32 values differ from the Go expression", total)
	}
}

// BenchmarkGELUErf times GELU over one calibration chunk's MLP activation
// (512 tokens x 6656, N(0, 1.5) values), one goroutine, in million values
// a second, on the active kernel and the portable Go loop.
func BenchmarkGELUErf(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	src := make([]float32, 512*6656)
	for i := range src {
		src[i] = float32(1.5 * r.NormFloat64())
	}
	x := make([]float32, len(src))
	run := func(b *testing.B) {
		for b.Loop() {
			copy(x, src)
			GELUErf(x)
		}
		b.ReportMetric(float64(b.N)*float64(len(x))/1e6/b.Elapsed().Seconds(), "Mvalues/s")
	}
	b.Run(Active(), run)
	b.Run("portable", func(b *testing.B) {
		defer usePortable()()
		run(b)
	})
}
