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
	plan := miniLayerPlan(t)
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
		policy   []RangePolicy
	}{
		{Precisions[0], 2, [][2]float64{{-1, 2}, {-1, 2}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {MaskClip, 0}},
			[]RangePolicy{"min-max x2", "min-max x2", PolicyBounded, PolicyBounded, PolicyBounded, PolicyFixed}},
		{Precisions[0], 1, [][2]float64{{-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {MaskClip, 0}},
			[]RangePolicy{PolicyMinMax, PolicyMinMax, PolicyBounded, PolicyBounded, PolicyBounded, PolicyFixed}},
		{Precisions[2], 2, [][2]float64{{-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {-0.5, 1}, {MaskClip, 0}},
			[]RangePolicy{PolicyMinMax, PolicyMinMax, PolicyMinMax, PolicyMinMax, PolicyMinMax, PolicyFixed}},
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
			if p := enc.Policy[n]; p != c.policy[i] || p.Why() == "" {
				t.Errorf("%s headroom %g: %s has policy %q (%q), want %q", c.prec.Name, c.headroom, n, p, p.Why(), c.policy[i])
			}
			lo, hi := e.MinMax(0)
			step := float64(e.Scale[0])
			if math.Abs(lo-c.want[i][0]) > step || math.Abs(hi-c.want[i][1]) > step {
				t.Errorf("%s headroom %g: %s encodes [%g, %g], want [%g, %g]", c.prec.Name, c.headroom, n, lo, hi, c.want[i][0], c.want[i][1])
			}
		}
	}
}

// TestEncodingsWider: a tensor named in Wider (by its last name part)
// takes that headroom in place of the default, the rest keep the default,
// and a bounded tensor keeps its observed range even when named.
func TestEncodingsWider(t *testing.T) {
	plan := miniLayerPlan(t)
	plan.Wider = map[string]float64{"mlp_act": 8, "probs": 4, "hidden_out": 3}
	observed := Ranges{}
	for _, a := range plan.Acts {
		observed[a] = [2]float64{-0.5, 1}
	}
	absmax := map[string][]float64{}
	for _, p := range plan.Params {
		absmax[p.Name] = []float64{1}
	}
	enc, err := plan.Encodings(Precisions[0], observed, Ranges{"attention_mask": {MaskClip, 0}}, absmax, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]float64{"layers.0/mlp_act": {-4, 8}, "layers.0/probs": {-0.5, 1}, "hidden_out": {-1.5, 3},
		"hidden_in": {-1, 2}, "layers.0/mlp_out": {-1, 2}}
	policy := map[string]RangePolicy{"layers.0/mlp_act": "min-max, own headroom x8", "layers.0/probs": PolicyBounded,
		"hidden_out": "min-max, own headroom x3", "hidden_in": "min-max x2", "layers.0/mlp_out": "min-max x2"}
	for _, a := range enc.Activations {
		w, ok := want[a.Name]
		if !ok {
			continue
		}
		delete(want, a.Name)
		if p := enc.Policy[a.Name]; p != policy[a.Name] || p.Why() == "" {
			t.Errorf("%s has policy %q (%q), want %q", a.Name, p, p.Why(), policy[a.Name])
		}
		lo, hi := a.MinMax(0)
		if step := float64(a.Scale[0]); math.Abs(lo-w[0]) > step || math.Abs(hi-w[1]) > step {
			t.Errorf("%s encodes [%g, %g], want %v", a.Name, lo, hi, w)
		}
	}
	if len(want) > 0 {
		t.Errorf("no encoding for %v", want)
	}
}

// miniLayerPlan is the encoding plan of the first layer graph of the
// golden mini model's export at context 24.
func miniLayerPlan(t *testing.T) *EncodingPlan {
	t.Helper()
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
	return NewEncodingPlan(m)
}
