package qnn

import (
	"math"
	"path/filepath"
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/onnxio"
)

// TestEncodingsHeadroom: at 16-bit activations a headroom h widens every
// observed range h times about 0, except the Softmax and Sigmoid outputs,
// the rope tables and the fixed mask; 8-bit activations and h = 1 keep the
// observed ranges.
func TestEncodingsHeadroom(t *testing.T) {
	export := exporttest.Export(t, exporttest.Golden("spark-mini-tied"), onnxgraph.ExportOptions{Context: 24})
	man, err := onnxgraph.ReadManifest(export)
	if err != nil {
		t.Fatal(err)
	}
	var layer onnxgraph.GraphEntry
	for _, e := range man.Graphs {
		if e.Kind == onnxgraph.KindLayer {
			layer = e
			break
		}
	}
	m, err := onnxio.ReadModelFile(filepath.Join(export, layer.File))
	if err != nil {
		t.Fatal(err)
	}
	plan := NewEncodingPlan(m)
	observed := Ranges{}
	for _, a := range plan.Acts {
		observed[a] = [2]float64{-0.5, 1}
	}
	fixed := Ranges{"attention_mask": {MaskClip, 0}}
	absmax := map[string][]float64{}
	for _, p := range plan.Params {
		absmax[p.Name] = []float64{1}
	}
	names := []string{"hidden_in", "layers.0/mlp_act", "layers.0/probs", "layers.0/gate", "rope_cos", "attention_mask"}
	for _, c := range []struct {
		prec     Precision
		headroom float64
		want     [][2]float64 // per name
	}{
		{Precisions[0], 2, [][2]float64{{-1, 2}, {-1, 2}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {MaskClip, 0}}},
		{Precisions[0], 1, [][2]float64{{-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {MaskClip, 0}}},
		{Precisions[2], 2, [][2]float64{{-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {MaskClip, 0}}},
	} {
		enc, err := plan.Encodings(c.prec, observed, fixed, absmax, c.headroom)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]Encoding{}
		for _, a := range enc.Activations {
			got[a.Name] = a
		}
		for i, n := range names {
			e, ok := got[n]
			if !ok {
				t.Fatalf("no encoding for %s", n)
			}
			lo, hi := e.MinMax(0)
			step := float64(e.Scale[0])
			if math.Abs(lo-c.want[i][0]) > step || math.Abs(hi-c.want[i][1]) > step {
				t.Errorf("%s headroom %g: %s encodes [%g, %g], want [%g, %g]", c.prec.Name, c.headroom, n, lo, hi, c.want[i][0], c.want[i][1])
			}
		}
	}
}
