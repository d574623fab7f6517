//go:build cgo

package onnxeval_test

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"sparkconv/onnxeval"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/onnxio"
	"sparkconv/ortrun"
	"sparkconv/ortrun/orttest"
)

// TestAgainstORT runs every graph of a golden mini export (both layouts,
// both GELU forms, a block graph) in onnxeval and in ONNX Runtime on random
// inputs and requires the same outputs (float32, within rounding).
func TestAgainstORT(t *testing.T) {
	orttest.Init(t)
	for _, o := range []onnxgraph.ExportOptions{{Context: 24}, {Context: 24, Layout: onnxgraph.LayoutRoll, GELU: "tanh", Granularity: "block"}, {Context: 24, Prefill: 6}} {
		dir := exporttest.Export(t, exporttest.Golden("spark-mini-tied"), o)
		man, err := onnxgraph.ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for _, ge := range man.AllGraphs() {
			path := filepath.Join(dir, ge.File)
			m, err := onnxio.ReadModelWithData(path)
			if err != nil {
				t.Fatal(err)
			}
			g, err := onnxeval.Load(m)
			if err != nil {
				t.Fatal(err)
			}
			feeds, ins := map[string]onnxgraph.Tensor{}, map[string]onnxeval.Value{}
			for _, in := range ge.Inputs {
				shape := make([]int, len(in.Shape))
				for i, d := range in.Shape {
					shape[i] = int(d)
				}
				n := onnxeval.Numel(shape)
				if in.DType == "int64" {
					ids := make([]int64, n)
					for i := range ids {
						ids[i] = int64(rng.IntN(50))
					}
					feeds[in.Name] = onnxgraph.I64Tensor(in.Shape, ids)
					ins[in.Name] = onnxeval.Value{Shape: shape, I: ids}
					continue
				}
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
				feeds[in.Name] = onnxgraph.F32Tensor(in.Shape, v)
				ins[in.Name] = onnxeval.Value{Shape: shape, F: v}
			}
			s, err := ortrun.OpenSession(path, ortrun.SessionOptions{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			want, err := s.Run(feeds)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.Run(ins, nil)
			if err != nil {
				t.Fatal(err)
			}
			for name, w := range want {
				gv := got[name].F
				var num, den float64
				for i, x := range w.F32 {
					d := float64(x - gv[i])
					num += d * d
					den += float64(x) * float64(x)
				}
				if snr := 10 * math.Log10(den/num); num != 0 && snr < 100 {
					t.Errorf("%s %s: onnxeval vs ORT %.1f dB", ge.File, name, snr)
				}
			}
		}
	}
}
