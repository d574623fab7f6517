package onnxeval

import (
	"testing"

	"sparkconv/onnxgraph"
)

// BenchmarkDecodeMatMul is one decode-step product at Spark's MLP shape,
// [1,1,2048] x [2048,6656], the interpreter's dominant cost when a bundle
// observes ranges; GFLOP/s per wall second.
func BenchmarkDecodeMatMul(b *testing.B) {
	const k, n = 2048, 6656
	bld := onnxgraph.New("mm", onnxgraph.Float32)
	x := bld.Input("x", onnxgraph.Float32, 1, 1, k)
	w := make([]float32, k*n)
	for i := range w {
		w[i] = float32(i%7) * 0.01
	}
	bld.OpTo("y", "MatMul", []string{x, bld.Float32s("w", []int64{k, n}, w)})
	bld.Output("y", onnxgraph.Float32, 1, 1, n)
	m, err := bld.Proto()
	if err != nil {
		b.Fatal(err)
	}
	g, err := Load(m)
	if err != nil {
		b.Fatal(err)
	}
	in := map[string]Value{"x": {Shape: []int{1, 1, k}, F: make([]float32, k)}}
	b.ResetTimer()
	for b.Loop() {
		if _, err := g.Run(in, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*k*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
