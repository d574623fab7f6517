package gptq

import (
	"context"
	"path/filepath"
	"testing"

	"sparkconv/convert"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// logitsOf runs the fp32 forward of a checkpoint or sparkconv output
// (its activation quantization included, as the runtime does it).
func logitsOf(t *testing.T, dir string, ids []int, quantized bool) []float32 {
	t.Helper()
	var m *forward.Model
	var err error
	if quantized {
		if m, err = convert.OpenForward(dir, forward.Options{}); err != nil {
			t.Fatal(err)
		}
	} else if m, err = forward.Open(dir, forward.Options{}); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r, err := m.Prefill(ids, forward.PrefillOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Logits
}

// TestSmoothW8A8: --smooth folds scales into the norms and g_proj (the
// output stays a plain W8A8 checkpoint), the model computes the same
// function (logits of the smoothed build as close to the bf16 model's as
// the unsmoothed build's, with int8 activations), and the 4-bit grids
// refuse it.
func TestSmoothW8A8(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	build := func(name string, smooth float64) *convert.Report {
		r, err := convert.Convert(context.Background(), convert.Options{Model: in, Out: filepath.Join(dir, name), Quiet: true}, convert.W8A8{}, &Calibrator{Budget: testBudget, Smooth: smooth})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	rs := build("s", 0.8)
	build("n", 0)
	if rs.Calibration.SmoothAlpha != 0.8 {
		t.Errorf("smoothquant_alpha %v", rs.Calibration.SmoothAlpha)
	}
	ids := []int{5, 77, 300, 12, 9, 410, 33, 2, 150, 61, 7, 480}
	ref := logitsOf(t, in, ids, false)
	ds := forward.Compare(ref, logitsOf(t, filepath.Join(dir, "s"), ids, true))
	dn := forward.Compare(ref, logitsOf(t, filepath.Join(dir, "n"), ids, true))
	t.Logf("logits against bf16: smoothed %v; not smoothed %v", ds, dn)
	if ds.SNR < 20 || ds.SNR < dn.SNR-3 {
		t.Errorf("smoothed build's logits: %v (unsmoothed %v)", ds, dn)
	}
	a, err := safetensors.OpenDir(in)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := safetensors.OpenDir(filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, mod := range []string{spark.InputNorm, spark.PostNorm, spark.GateProj} {
		name := spark.LayerWeight(1, mod)
		_, x, _ := a.Raw(name)
		_, y, err := b.Raw(name)
		if err != nil || string(x) == string(y) {
			t.Errorf("%s not rewritten by the smoothing (%v)", name, err)
		}
	}
	_, err = convert.Convert(context.Background(), convert.Options{Model: in, Out: filepath.Join(dir, "g"), Quiet: true}, convert.W4A8{Group: 64}, &Calibrator{Budget: testBudget, Smooth: 0.5})
	if err == nil {
		t.Error("--smooth accepted for 4-bit")
	}
}
