package qnnbundle

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio/npz"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/onnxio"
	"sparkconv/qnn"
)

// miniBundle exports the golden mini model (context 24, the sliding
// window of 8 wraps) and bundles every graph at prec into a fresh folder.
func miniBundle(t *testing.T, o onnxgraph.ExportOptions, prec qnn.Precision) (export, out string, man *onnxgraph.Manifest, held map[string][]Sample) {
	t.Helper()
	model := exporttest.Golden("spark-mini-tied")
	export = exporttest.Export(t, model, o)
	man, err := onnxgraph.ReadManifest(export)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := forward.Open(model, forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ids := make([]int, man.Context)
	for i := range ids {
		ids[i] = (i*37 + 11) % ref.Cfg.VocabSize
	}
	heldIDs := make([]int, man.Context)
	for i := range heldIDs {
		heldIDs[i] = (i*53 + 5) % ref.Cfg.VocabSize
	}
	calib, _ := SamplePositions(4, 0, len(ids)-1)
	hold := []int{0, 1, 2}
	pos := Positions{Calib: calib, Held: hold, Observe: ObservePositions(12, len(ids)-1, calib, nil)}
	tr, err := NewTrace(ref, man, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	htr, err := NewTrace(ref, man, heldIDs, hold)
	if err != nil {
		t.Fatal(err)
	}
	out = t.TempDir()
	os.MkdirAll(filepath.Join(out, QDQDir), 0o755)
	held = map[string][]Sample{}
	var qdq []onnxgraph.GraphEntry
	for _, e := range onnxgraph.GraphOrder(man) {
		res, qe, err := BundleGraph(export, out, tr, e, pos, prec, RangeOptions{MaskClip: qnn.MaskClip, Headroom: qnn.Headroom})
		if err != nil {
			t.Fatal(err)
		}
		h, err := htr.Collect(e, hold, true)
		if err != nil {
			t.Fatal(err)
		}
		if res.Samples != 4 || res.Held != 3 || len(h) != 3 {
			t.Fatalf("%s: %d calibration, %d held samples", e.Name, res.Samples, len(h))
		}
		held[e.Name] = h
		qdq = append(qdq, *qe)
	}
	if err := WriteQDQManifest(out, man, qdq, nil); err != nil {
		t.Fatal(err)
	}
	return export, out, man, held
}

// tinyPrefillBundles exports the tiny fixture at context 64 with prefill
// graphs of 16 tokens; build bundles the export at a precision (3 npz
// positions, 16 observed, one thread, forced) into a fresh folder, each
// of set applied to its options first.
func tinyPrefillBundles(t *testing.T) (export string, man *onnxgraph.Manifest, build func(qnn.Precision, ...func(*Options)) (*Bundle, string)) {
	t.Helper()
	model := fixturestest.Tiny(t, false)
	export = exporttest.Export(t, model, onnxgraph.ExportOptions{Context: 64, Prefill: 16})
	man, err := onnxgraph.ReadManifest(export)
	if err != nil {
		t.Fatal(err)
	}
	return export, man, func(prec qnn.Precision, set ...func(*Options)) (*Bundle, string) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "qnn")
		o := Options{Model: model, Export: export, Out: out, Precision: prec,
			Positions: 3, Observe: 16, MaskClip: qnn.MaskClip, Headroom: qnn.Headroom, Threads: 1, Force: true}
		for _, f := range set {
			f(&o)
		}
		b, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		return b, out
	}
}

func readEnc(t *testing.T, out, name string) *qnn.Encodings {
	t.Helper()
	f, err := qnn.ReadEncodings(filepath.Join(out, name+".aimet", name+".encodings"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestBundleEncodings: every encoding names a tensor of its graph; the
// KV inputs share their outputs' grids, Concat inputs their output's; no
// encoding sits inside an RMSNorm or GELU pattern (but the pattern's input
// and output have one); every entry is legal for HTP; the lint of the pair
// is clean; the .aimet graph is the export's file byte for byte.
func TestBundleEncodings(t *testing.T) {
	export, out, man, _ := miniBundle(t, onnxgraph.ExportOptions{Context: 24}, qnn.Precisions[0])
	for _, e := range man.Graphs {
		m, err := onnxio.ReadModelFile(filepath.Join(out, e.Name+".aimet", e.Name+".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		orig, _ := os.ReadFile(filepath.Join(export, e.File))
		copied, _ := os.ReadFile(filepath.Join(out, e.Name+".aimet", e.Name+".onnx"))
		if !bytes.Equal(orig, copied) {
			t.Errorf("%s: the bundle's graph differs from the export's", e.Name)
		}
		f := readEnc(t, out, e.Name)
		if fs := qnn.LintEncodings(m, f); len(fs) != 0 {
			t.Errorf("%s: lint --encodings: %v", e.Name, fs)
		}
		values, inits := map[string]bool{}, map[string]bool{} // the graph's inputs and node outputs; its initializers
		for _, in := range m.Graph.Initializer {
			inits[in.GetName()] = true
		}
		for _, in := range m.Graph.Input {
			values[in.GetName()] = true
		}
		for _, n := range m.Graph.Node {
			for _, o := range n.Output {
				values[o] = true
			}
		}
		grid := map[string]qnn.Encoding{}
		for _, a := range f.Activations {
			if !values[a.Name] {
				t.Errorf("%s: activation encoding %s names no value of the graph", e.Name, a.Name)
			}
			if p := a.Problems(false); len(p) != 0 && e.Kind != onnxgraph.KindEmbed {
				t.Errorf("%s: %s: %v", e.Name, a.Name, p)
			}
			grid[a.Name] = a
		}
		for _, p := range f.Params {
			if !inits[p.Name] {
				t.Errorf("%s: param encoding %s names no initializer", e.Name, p.Name)
			}
			if pr := p.Problems(true); len(pr) != 0 {
				t.Errorf("%s: %s: %v", e.Name, p.Name, pr)
			}
		}
		for _, li := range e.LayerInfos() {
			sfx := onnxgraph.LayerSuffix(e.Kind, li.Layer)
			for _, pair := range [][2]string{{"past_key", "new_key"}, {"past_key", "present_key"}, {"past_value", "new_value"}, {"past_value", "present_value"}} {
				in, ok1 := grid[pair[0]+sfx]
				o, ok2 := grid[pair[1]+sfx]
				if ok1 && ok2 && !in.Same(o) {
					t.Errorf("%s: %s and %s have different grids", e.Name, pair[0]+sfx, pair[1]+sfx)
				}
			}
		}
		for _, n := range m.Graph.Node {
			if n.GetOpType() != "Concat" {
				continue
			}
			for _, in := range n.Input {
				if !grid[in].Same(grid[n.Output[0]]) {
					t.Errorf("%s: Concat %s input %s not tied to its output", e.Name, n.GetName(), in)
				}
			}
		}
		pats := qnn.NewEncodingPlan(m).Patterns
		if e.Kind == onnxgraph.KindLayer && len(pats) != 3 { // two RMSNorms and the GELU
			t.Errorf("%s: %d fusable patterns, want 3", e.Name, len(pats))
		}
		for _, pt := range pats {
			for _, v := range pt.Interior {
				if _, ok := grid[v]; ok {
					t.Errorf("%s: encoding inside the %s of %s: %s", e.Name, pt.Kind, pt.Input, v)
				}
			}
			for _, v := range []string{pt.Input, pt.Output} {
				if _, ok := grid[v]; !ok {
					t.Errorf("%s: %s %s has no encoding on its boundary %s", e.Name, pt.Kind, pt.Output, v)
				}
			}
		}
	}
	// The mask is encoded over [MaskClip, 0].
	m := grid0(t, out, "layer_00", "attention_mask")
	if lo, hi := m.MinMax(0); hi != 0 || lo > qnn.MaskClip+0.01 || lo < qnn.MaskClip-0.01 {
		t.Errorf("mask grid [%v, %v]", lo, hi)
	}
}

func grid0(t *testing.T, out, graph, name string) qnn.Encoding {
	for _, a := range readEnc(t, out, graph).Activations {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("%s: no encoding for %s", graph, name)
	return qnn.Encoding{}
}

// TestBundleNPZ reads the calibration files with npyio (a NumPy reader we
// did not write): one array per graph input, named after it, the samples on
// a new first axis, float32, and input_ids as int32.
func TestBundleNPZ(t *testing.T) {
	_, out, man, _ := miniBundle(t, onnxgraph.ExportOptions{Context: 24, Layout: onnxgraph.LayoutRoll}, qnn.Precisions[0])
	for _, e := range man.Graphs {
		r, err := npz.Open(filepath.Join(out, CalibDir, e.Name+".npz"))
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, in := range e.Inputs {
			keys = append(keys, in.Name+".npy")
			h := r.Header(in.Name + ".npy")
			if h == nil {
				t.Fatalf("%s: no array %s (have %v)", e.Name, in.Name, r.Keys())
			}
			want := []int{4}
			for _, d := range in.Shape {
				want = append(want, int(d))
			}
			if !slices.Equal(h.Descr.Shape, want) {
				t.Errorf("%s/%s: shape %v, want %v", e.Name, in.Name, h.Descr.Shape, want)
			}
			if in.DType == "int64" {
				var v []int32
				if err := r.Read(in.Name+".npy", &v); err != nil || strings.Trim(h.Descr.Type, "'") != "<i4" || len(v) != 4 {
					t.Errorf("%s/%s: %v %s %d", e.Name, in.Name, err, h.Descr.Type, len(v))
				}
				continue
			}
			var v []float32
			if err := r.Read(in.Name+".npy", &v); err != nil || strings.Trim(h.Descr.Type, "'") != "<f4" {
				t.Fatalf("%s/%s: %v %s", e.Name, in.Name, err, h.Descr.Type)
			}
			if in.Name == "attention_mask" && v[0] != float32(man.MaskValue) {
				t.Errorf("%s: first sample's mask starts %v, want the runtime's mask_value %v (position 0 has empty slots)", e.Name, v[0], man.MaskValue)
			}
		}
		slices.Sort(keys)
		got := r.Keys()
		slices.Sort(got)
		if !slices.Equal(keys, got) {
			t.Errorf("%s: arrays %v, want %v", e.Name, got, keys)
		}
		r.Close()
	}
}

// TestBundleDeterministic: the same inputs give the same bytes.
func TestBundleDeterministic(t *testing.T) {
	_, a, man, _ := miniBundle(t, onnxgraph.ExportOptions{Context: 24}, qnn.Precisions[0])
	_, b, _, _ := miniBundle(t, onnxgraph.ExportOptions{Context: 24}, qnn.Precisions[0])
	for _, e := range man.Graphs {
		for _, name := range []string{e.Name + ".aimet/" + e.Name + ".encodings", CalibDir + "/" + e.Name + ".npz", QDQDir + "/" + e.File} {
			x, _ := os.ReadFile(filepath.Join(a, name))
			y, _ := os.ReadFile(filepath.Join(b, name))
			if len(x) == 0 || !bytes.Equal(x, y) {
				t.Errorf("%s differs between two runs (%d, %d bytes)", name, len(x), len(y))
			}
		}
	}
}

// TestCheckHeldOut: the window scored in each held-out sequence must fit
// the export's context; the refusal names the numbers.
func TestCheckHeldOut(t *testing.T) {
	for _, c := range []struct {
		n, context int
		want       string
	}{
		{256, 1024, ""},
		{256, 256, ""},
		{2000, 1024, "--held-out 2000: the export's context holds 1024 positions"},
	} {
		err := CheckHeldOut(c.n, c.context)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckHeldOut(%d, %d) = %v, want %q", c.n, c.context, err, c.want)
		}
	}
}
