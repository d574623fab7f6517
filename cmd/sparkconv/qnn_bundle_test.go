package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/qnn"
	"sparkconv/qnnbundle"
)

// TestQNNBundleCommand: the tiny fixture's export (context 64, the window
// of 16 wraps) bundled at w8a16 and w16a16: every graph's folder, npz and
// QDQ graph is there, bundle.json carries a finite simulated SNR per graph,
// w16a16 beats w8a16 on every layer, the pairs lint clean, a misnamed or
// in-pattern encoding fails the lint by rule, and w8a8 is refused (exit 1,
// nothing written) without --force; w4a16 likewise, and with --force its
// pairs lint clean.
func TestQNNBundleCommand(t *testing.T) {
	requireORT(t)
	model := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	export := filepath.Join(dir, "onnx")
	mustRun(t, "export-onnx", "--model", model, "--out", export, "--context", "64")
	snr := map[string]map[string]float64{}
	forced := false
	for _, prec := range []string{"w8a16", "w16a16", "w8a8"} {
		out := filepath.Join(dir, prec)
		stdout := mustRun(t, "qnn-bundle", "--model", model, "--export", export, "--out", out, "--precision", prec,
			"--positions", "4", "--observe", "32", "--held-out", "4", "--threads", "1", "--json", "--force")
		var b qnnbundle.Bundle
		if err := json.Unmarshal([]byte(stdout), &b); err != nil {
			t.Fatalf("%s: --json: %v\n%s", prec, err, stdout)
		}
		if b.Precision != prec || len(b.Graphs) != 6 || b.Calibration.Tokens != 64 || len(b.Calibration.HeldOut) != 4 || b.Mask.EncodedRange[0] != qnn.MaskClip {
			t.Fatalf("%s: bundle.json %+v", prec, b)
		}
		onDisk, _ := os.ReadFile(filepath.Join(out, qnnbundle.BundleFile))
		if !strings.Contains(string(onDisk), `"snr_db"`) {
			t.Errorf("%s: bundle.json lacks snr_db", prec)
		}
		snr[prec] = map[string]float64{}
		for name, g := range b.Graphs {
			if g.SNR == nil {
				t.Fatalf("%s %s: no simulated SNR", prec, name)
			}
			snr[prec][name] = *g.SNR
			for _, f := range append(g.Files, g.CalibFile, qnnbundle.QDQDir+"/"+name+".onnx") {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Errorf("%s: %v", prec, err)
				}
			}
		}
		if prec == "w8a8" {
			forced = b.Forced
		} else if b.Forced {
			t.Errorf("%s needed --force: %s", prec, b.ForcedBecause)
		}
		if b.Graphs["head"].Top1 == nil {
			t.Errorf("%s: head has no top-1 agreement", prec)
		}
	}
	for name, v := range snr["w8a16"] {
		if strings.HasPrefix(name, "layer_") && (snr["w16a16"][name] <= v || snr["w8a8"][name] >= v) {
			t.Errorf("%s: w16a16 %.1f dB, w8a16 %.1f dB, w8a8 %.1f dB: not in that order", name, snr["w16a16"][name], v, snr["w8a8"][name])
		}
		t.Logf("%s: w16a16 %.1f dB, w8a16 %.1f dB, w8a8 %.1f dB", name, snr["w16a16"][name], v, snr["w8a8"][name])
	}

	aimet := filepath.Join(dir, "w8a16", "layer_01.aimet")
	graph, enc := filepath.Join(aimet, "layer_01.onnx"), filepath.Join(aimet, "layer_01.encodings")
	mustRun(t, "lint", graph, "--encodings", enc)
	data, _ := os.ReadFile(enc)
	bad := strings.Replace(string(data), `"name": "layers.1/q_rope"`, `"name": "/layers.1/attn/q_rope"`, 1)
	bad = strings.Replace(bad, `"name": "layers.1/mlp_act"`, `"name": "layers.1/attn_norm/Sqrt_0"`, 1)
	badPath := filepath.Join(dir, "bad.encodings")
	os.WriteFile(badPath, []byte(bad), 0o644)
	stdout, _, code := run(t, "lint", graph, "--encodings", badPath)
	if code != 1 || !strings.Contains(stdout, "encoding-unknown-tensor") || !strings.Contains(stdout, "/layers.1/attn/q_rope") ||
		!strings.Contains(stdout, "encoding-in-fused-pattern") {
		t.Errorf("lint of a bad pair: exit %d\n%s", code, stdout)
	}

	// Without --force a bundle below the bar is refused and nothing is written.
	refused := filepath.Join(dir, "w8a8-refused")
	_, stderr, code := run(t, "qnn-bundle", "--model", model, "--export", export, "--out", refused, "--precision", "w8a8",
		"--positions", "4", "--observe", "32", "--held-out", "4", "--threads", "1")
	switch {
	case forced && (code != 1 || !strings.Contains(stderr, "refused: w8a8 simulates at") || !strings.Contains(stderr, "--force")):
		t.Errorf("w8a8 below the bar: exit %d\n%s", code, stderr)
	case forced:
		if _, err := os.Stat(refused); err == nil {
			t.Error("a refused bundle left its folder")
		}
	case code != 0:
		t.Errorf("w8a8 above the bar, yet exit %d\n%s", code, stderr)
	}
	// w4a16 on the fixture's random weights simulates below the bar:
	// refused without --force, and with it every pair lints clean and
	// bundle.json records the recipe and each layer's weight search.
	w4 := filepath.Join(dir, "w4a16")
	_, stderr, code = run(t, "qnn-bundle", "--model", model, "--export", export, "--out", w4, "--precision", "w4a16",
		"--positions", "4", "--observe", "32", "--held-out", "4", "--threads", "1")
	if code != 1 || !strings.Contains(stderr, "refused: w4a16 simulates at") {
		t.Errorf("w4a16 without --force: exit %d\n%s", code, stderr)
	}
	stdout = mustRun(t, "qnn-bundle", "--model", model, "--export", export, "--out", w4, "--precision", "w4a16",
		"--positions", "4", "--observe", "32", "--held-out", "4", "--threads", "1", "--json", "--force")
	var b4 qnnbundle.Bundle
	if err := json.Unmarshal([]byte(stdout), &b4); err != nil {
		t.Fatalf("w4a16: --json: %v\n%s", err, stdout)
	}
	if b4.WeightBits != 4 || b4.Recipe == nil || b4.Recipe.HeadBits != 8 || b4.Recipe.KVBits != 8 || !b4.Forced {
		t.Errorf("w4a16 bundle.json: %+v, recipe %+v", b4, b4.Recipe)
	}
	for name, g := range b4.Graphs {
		if strings.HasPrefix(name, "layer_") && (g.Search == nil || g.Search.Weights != 8) {
			t.Errorf("w4a16 %s: weight search %+v", name, g.Search)
		}
		aimet := filepath.Join(w4, name+".aimet")
		mustRun(t, "lint", filepath.Join(aimet, name+".onnx"), "--encodings", filepath.Join(aimet, name+".encodings"))
	}
	for _, args := range [][]string{
		{"--precision", "w4a8"}, {"--positions", "0"}, {"--mask-clip", "0"}, {"--held-out", "-1"},
	} {
		a := append([]string{"qnn-bundle", "--model", model, "--export", export, "--out", filepath.Join(dir, "x")}, args...)
		if _, _, code := run(t, a...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
