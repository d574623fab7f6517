package convert

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/quant"
	"sparkconv/synthetic"
)

// BenchmarkGPTQLinear is the per-tensor path (choose the codes, pack the
// four tensors) in MB/s of bf16 input.
func BenchmarkGPTQLinear(b *testing.B) {
	for _, sh := range []struct{ n, k int }{{2048, 2048}, {6656, 2048}} {
		m := quant.BF16Matrix(sh.n, sh.k, syntheticBF16(sh.n, sh.k, 1))
		t := Target{Source: "w", Module: "w", N: sh.n, K: sh.k}
		for _, search := range []bool{true, false} {
			spec := Int4Spec{Target: t, Grid: GridSpec{Kind: GridSym4, Group: 128, DType: quant.ScaleF16, Search: search},
				Chooser: RTN{Kind: GridSym4, Search: search}, Parts: GPTQParts(t, 128)}
			b.Run(fmt.Sprintf("%dx%d/search=%v", sh.n, sh.k, search), func(b *testing.B) {
				benchEncodeInt4(b, spec, m)
			})
		}
	}
}

// BenchmarkGPTQWrite is the whole command on the small fixture (search,
// plain baseline for the report, packing, writing), in MB/s of the input
// checkpoint's bf16 bytes.
func BenchmarkGPTQWrite(b *testing.B) {
	in := fixturestest.Preset(b, "small", false)
	size := synthetic.Presets["small"].Bytes(true)
	for _, search := range []bool{true, false} {
		b.Run(fmt.Sprintf("search=%v", search), func(b *testing.B) {
			bytes := size
			b.SetBytes(bytes)
			c0 := cpuSeconds()
			i := 0
			for b.Loop() {
				i++
				o := Options{Model: in, Out: filepath.Join(b.TempDir(), fmt.Sprint(i)), Quiet: true}
				if _, err := Convert(context.Background(), o, W4A8{Group: 128, QuantHead: true, NoSearch: !search}, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(bytes)*float64(b.N)/1e6/(cpuSeconds()-c0), "MB/cpu-s")
		})
	}
}

// benchEncodeInt4 times EncodeInt4 on one bf16 matrix, in MB/s and MB per
// CPU-second of its bf16 bytes.
func benchEncodeInt4(b *testing.B, spec Int4Spec, m quant.Matrix) {
	bytes := int64(m.N * m.K * 2)
	b.SetBytes(bytes)
	c0 := cpuSeconds()
	for b.Loop() {
		if _, _, err := EncodeInt4(spec, m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(bytes)*float64(b.N)/1e6/(cpuSeconds()-c0), "MB/cpu-s")
}
