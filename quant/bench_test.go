package quant

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// Benchmarks report MB/s of bf16 input (N*K*2 bytes per op, also for the
// packers) and, because the machine is shared, MB per CPU-second of the
// whole process (user+sys over all its threads), plus "model-s": the wall
// seconds the measured speed needs for the 1.7B model's 1.6e9 weights.
// Matrices are N(0, 0.02) with 6 input columns scaled by 10..50.

var benchShapes = []struct{ n, k int }{{2048, 2048}, {6656, 2048}}

const modelWeights = 1.6e9

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runBench runs op once per iteration over an n*k matrix and reports the
// metrics described above.
func runBench(b *testing.B, n, k int, op func() error) {
	b.SetBytes(int64(n * k * 2))
	b.ReportAllocs()
	start, cpu0 := time.Now(), cpuTime()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	wall, cpu := time.Since(start), cpuTime()-cpu0
	mb := float64(b.N) * float64(n*k*2) / 1e6
	if cpu > 0 {
		b.ReportMetric(mb/cpu.Seconds(), "MB/cpu-s")
	}
	b.ReportMetric(wall.Seconds()/float64(b.N)/float64(n*k)*modelWeights, "model-s")
}

func forShapes(b *testing.B, body func(b *testing.B, n, k int, bits []uint16)) {
	for _, sh := range benchShapes {
		bits, _ := realistic(sh.n, sh.k, 1)
		b.Run(fmt.Sprintf("%dx%d", sh.n, sh.k), func(b *testing.B) { body(b, sh.n, sh.k, bits) })
	}
}

func BenchmarkInt8PerChannel(b *testing.B) {
	forShapes(b, func(b *testing.B, n, k int, bits []uint16) {
		var r Int8Result
		b.Run("bf16-in", func(b *testing.B) {
			runBench(b, n, k, func() error { return QuantizeInt8(&r, BF16Matrix(n, k, bits), ScaleBF16) })
		})
		f := make([]float32, n*k)
		for i, v := range bits {
			f[i] = bf16ToF32(v)
		}
		b.Run("f32-in", func(b *testing.B) {
			runBench(b, n, k, func() error { return QuantizeInt8(&r, F32Matrix(n, k, f), ScaleBF16) })
		})
	})
}

func BenchmarkSym4(b *testing.B) {
	bench4(b, func(r *Int4Result, m Matrix, group int, search bool) error {
		return QuantizeSym4(r, m, group, ScaleF16, search)
	})
}

func BenchmarkAsym4(b *testing.B) {
	bench4(b, func(r *Int4Result, m Matrix, group int, search bool) error {
		return QuantizeAsym4(r, m, group, ScaleBF16, search)
	})
}

func BenchmarkUInt4(b *testing.B) {
	bench4(b, func(r *Int4Result, m Matrix, group int, search bool) error {
		return QuantizeUInt4(r, m, group, ScaleBF16, search)
	})
}

// bench4 times a 4-bit grid's quantizer at Spark's shapes: the plain rule
// and the MSE search at group 128, and the search at group 32.
func bench4(b *testing.B, quantize func(r *Int4Result, m Matrix, group int, search bool) error) {
	forShapes(b, func(b *testing.B, n, k int, bits []uint16) {
		var r Int4Result
		for _, c := range []struct {
			name   string
			group  int
			search bool
		}{{"plain-g128", 128, false}, {"search-g128", 128, true}, {"search-g32", 32, true}} {
			b.Run(c.name, func(b *testing.B) {
				runBench(b, n, k, func() error { return quantize(&r, BF16Matrix(n, k, bits), c.group, c.search) })
			})
		}
	})
}

func BenchmarkPack(b *testing.B) {
	const group = 128
	forShapes(b, func(b *testing.B, n, k int, bits []uint16) {
		var r Int4Result
		if err := QuantizeAsym4(&r, BF16Matrix(n, k, bits), group, ScaleBF16, false); err != nil {
			b.Fatal(err)
		}
		groups := k / group
		packed := make([]byte, n*k/2)
		params := make([]byte, n*groups*4)
		gidx := make([]byte, 4*k)
		b.Run("gptq", func(b *testing.B) { // qweight + qzeros + scales + g_idx
			runBench(b, n, k, func() error {
				if err := PackGPTQQWeight(packed, r.Codes, n, k); err != nil {
					return err
				}
				if err := GPTQSymQZeros(params[:groups*n/2], groups, n); err != nil {
					return err
				}
				if err := PackGPTQScales(params[:groups*n*2], r.Scales, n, groups); err != nil {
					return err
				}
				return PutGPTQGIdx(gidx, k, group)
			})
		})
		b.Run("tinygemm-portable", func(b *testing.B) { // qweight + scales_and_zeros
			runBench(b, n, k, func() error {
				if err := PackTinygemm(packed, r.Codes, n, k); err != nil {
					return err
				}
				return PackTinygemmScalesZeros(params, r.Scales, r.Zeros, n, groups, ScaleBF16)
			})
		})
		b.Run("compressed-tensors", func(b *testing.B) { // weight_packed + weight_zero_point
			zeros := make([]uint8, n*groups)
			runBench(b, n, k, func() error {
				if err := PackCTWeight(packed, r.Codes, n, k); err != nil {
					return err
				}
				return PackCTZeros(params[:n*groups/2], zeros, n, groups)
			})
		})
		for _, l := range []KernelLayout{LayoutAVX512, LayoutAVX2} {
			b.Run("tinygemm-"+l.String(), func(b *testing.B) {
				runBench(b, n, k, func() error { return PackTinygemmKernel(packed, r.Codes, n, k, l) })
			})
		}
		b.Run("unpack-gptq", func(b *testing.B) {
			codes := make([]uint8, n*k)
			runBench(b, n, k, func() error { return UnpackGPTQQWeight(codes, packed, n, k) })
		})
	})
}
