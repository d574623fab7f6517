package gptq

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/calib"
	"sparkconv/convert"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// TestFloatTarget: at weight 1 (and damping far below the Hessian's
// scale) the target W* solves the least-squares normal equations of
// min ||W* X - W X_f||, W* H = W (H + C), with act-order's permutation
// in play; at 0 it is W itself, and in between it moves linearly.
func TestFloatTarget(t *testing.T) {
	const n, k, rows = 5, 24, 400
	rng := rand.New(rand.NewPCG(3, 4))
	x, xf := make([]float32, rows*k), make([]float32, rows*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * (1 + float64(i%k)/4)) // unequal channels: a real permutation
		xf[i] = x[i] + float32(0.2*rng.NormFloat64())
	}
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	h := calib.NewHessian(k)
	h.AddRef(x, xf, rows)
	h.Finish()
	var f Factor
	if err := Prepare(&f, h.H, k, 1e-7, true); err != nil {
		t.Fatal(err)
	}
	row := func(m []float32, r int) []float32 { return m[r*k : (r+1)*k] }
	full := floatTarget(w, n, k, &f, h.Cross, 1)
	half := floatTarget(w, n, k, &f, h.Cross, 0.5)
	zero := floatTarget(w, n, k, &f, h.Cross, 0)
	for r := range n {
		ws, wr := full.Row(r, nil), row(w, r)
		var worst, scale float64
		for b := range k {
			// (W* H)[b] - (W (H + C))[b]
			var lhs, rhs float64
			for a := range k {
				lhs += float64(ws[a]) * h.H[a*k+b]
				rhs += float64(wr[a]) * (h.H[a*k+b] + float64(h.Cross[a*k+b]))
			}
			worst, scale = max(worst, math.Abs(lhs-rhs)), max(scale, math.Abs(rhs))
		}
		if worst > 1e-4*scale {
			t.Errorf("row %d: normal equations off by %.3g (scale %.3g)", r, worst, scale)
		}
		hr, zr := half.Row(r, nil), zero.Row(r, nil)
		for c := range k {
			if zr[c] != wr[c] {
				t.Fatalf("row %d col %d: weight 0 gives %g, want W's %g", r, c, zr[c], wr[c])
			}
			if mid := (wr[c] + ws[c]) / 2; math.Abs(float64(hr[c]-mid)) > 1e-5*(1+math.Abs(float64(mid))) {
				t.Fatalf("row %d col %d: weight 0.5 gives %g, want the midpoint %g", r, c, hr[c], mid)
			}
		}
	}
}

// TestFloatTargetSequential: with a float target the config records its
// weight; layer 0's q_k_v_proj reads the embedding's norm, where the float
// and the quantized model still agree (C = 0), so its codes are GPTQ's
// own, byte for byte, while o_proj's input already carries the quantized
// q_k_v_proj and its codes move; and SmoothQuant is refused beside it.
func TestFloatTargetSequential(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	runGPTQ(t, in, filepath.Join(dir, "plain"), &Calibrator{Budget: testBudget}, false)
	runGPTQ(t, in, filepath.Join(dir, "float"), &Calibrator{Budget: testBudget, FloatTarget: 0.25}, false)
	meta := readJSON(t, filepath.Join(dir, "float", "config.json"))["quantization_config"].(map[string]any)["meta"].(map[string]any)
	if meta["float_target"] != 0.25 {
		t.Errorf("config meta.float_target = %v, want 0.25", meta["float_target"])
	}
	if _, ok := readJSON(t, filepath.Join(dir, "plain", "config.json"))["quantization_config"].(map[string]any)["meta"].(map[string]any)["float_target"]; ok {
		t.Errorf("config meta.float_target written without a float target")
	}
	raw := func(run, name string) []byte {
		c, err := safetensors.OpenDir(filepath.Join(dir, run))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, b, err := c.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(b)
	}
	for _, tc := range []struct {
		module string
		same   bool
	}{{spark.QKV, true}, {spark.OProj, false}, {spark.MLPDown, false}} {
		name := spark.LayerWeight(0, tc.module)
		name = strings.TrimSuffix(name, ".weight") + ".qweight"
		if got := bytes.Equal(raw("plain", name), raw("float", name)); got != tc.same {
			t.Errorf("%s: codes identical with and without the float target: %v, want %v", name, got, tc.same)
		}
	}
	_, err := convert.Convert(context.Background(), convert.Options{Model: in, Out: filepath.Join(dir, "w8"), Quiet: true}, convert.W8A8{}, &Calibrator{Budget: testBudget, FloatTarget: 0.25, Smooth: 0.5})
	if err == nil || !strings.Contains(err.Error(), "SmoothQuant") {
		t.Errorf("float target with SmoothQuant: err = %v, want a refusal naming SmoothQuant", err)
	}
}
