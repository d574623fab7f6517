package gptq

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"

	"sparkconv/convert"
	"sparkconv/fixtures"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/quant"
)

// synthetic returns bf16 bits of an [n, k] matrix like the fixtures' (and
// real) linears: N(0, 0.02) with a few input columns scaled by 10-50.
func synthetic(n, k int, seed uint64) []uint16 {
	rng := rand.New(rand.NewPCG(seed, 7))
	outlier := map[int]float64{}
	for len(outlier) < max(2, k/512) {
		outlier[rng.IntN(k)] = 10 + 40*rng.Float64()
	}
	w := make([]uint16, n*k)
	for i := range w {
		v := rng.NormFloat64() * 0.02
		if f, ok := outlier[i%k]; ok {
			v *= f
		}
		w[i] = uint16(math.Float32bits(float32(v)) >> 16)
	}
	return w
}

// BenchmarkGPTQLinear is the per-tensor path (choose the codes, pack the
// four tensors) in MB/s of bf16 input.
func BenchmarkGPTQLinear(b *testing.B) {
	for _, sh := range []struct{ n, k int }{{2048, 2048}, {6656, 2048}} {
		m := quant.BF16Matrix(sh.n, sh.k, synthetic(sh.n, sh.k, 1))
		t := convert.Int4Target{Source: "w", Module: "w", N: sh.n, K: sh.k}
		for _, search := range []bool{true, false} {
			spec := convert.Int4Spec{Target: t, Group: 128, ScaleDType: quant.ScaleF16, Grid: convert.GridSym4,
				Chooser: convert.RTN{Grid: convert.GridSym4, Search: search}, Parts: Parts(t, 128)}
			b.Run(fmt.Sprintf("%dx%d/search=%v", sh.n, sh.k, search), func(b *testing.B) {
				bytes := int64(sh.n * sh.k * 2)
				b.SetBytes(bytes)
				c0 := cpuSeconds()
				for b.Loop() {
					if _, _, err := convert.EncodeInt4(spec, m); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(bytes)*float64(b.N)/1e6/(cpuSeconds()-c0), "MB/cpu-s")
			})
		}
	}
}

// BenchmarkGPTQWrite is the whole command on the small fixture (search,
// plain baseline for the report, packing, writing), in MB/s of the input
// checkpoint's bf16 bytes.
func BenchmarkGPTQWrite(b *testing.B) {
	in := fixturestest.Preset(b, "small", false)
	size := fixtures.Presets["small"].Bytes(true)
	for _, search := range []bool{true, false} {
		b.Run(fmt.Sprintf("search=%v", search), func(b *testing.B) {
			bytes := size
			b.SetBytes(bytes)
			c0 := cpuSeconds()
			i := 0
			for b.Loop() {
				i++
				o := Options{Options: convert.Options{Model: in, Out: filepath.Join(b.TempDir(), fmt.Sprint(i)), Quiet: true}, Group: 128, QuantHead: true, NoSearch: !search}
				if _, err := Write(context.Background(), o); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(bytes)*float64(b.N)/1e6/(cpuSeconds()-c0), "MB/cpu-s")
		})
	}
}

// cpuSeconds is this process's user+system CPU time: MB per CPU-second does
// not depend on how busy the shared machine is.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
