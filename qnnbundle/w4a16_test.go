package qnnbundle

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/ortrun/orttest"
	"sparkconv/qnn"
)

// TestBundleW4A16 bundles the tiny model's export (context 64, prefill
// graphs of 16 tokens) at w4a16, qai-hub-models' LLM recipe: every layer's
// MatMul weights at 4 bits per output channel (offset -8), the head's at 8,
// the embedding table at 16, the KV cache and every tensor tied to it at 8
// bits symmetric, the other activations at 16; each pair lints clean, the
// prefill graphs take their decode graphs' weight grids, and the searched
// grids simulate above the absmax ones (the same recipe without Search) in
// every layer. The SNRs and the encodings' bytes are this fixture's.
func TestBundleW4A16(t *testing.T) {
	orttest.Init(t)
	_, man, build := tinyPrefillBundles(t)
	prec, err := qnn.ParsePrecision("w4a16")
	if err != nil {
		t.Fatal(err)
	}
	b, out := build(prec)
	rtn := prec
	rtn.Search = false
	br, _ := build(rtn)
	if b.WeightBits != 4 || b.ActBits != 16 || !b.Forced {
		t.Errorf("bundle.json: weight bits %d, activation bits %d, forced %v", b.WeightBits, b.ActBits, b.Forced)
	}
	// Simulated SNR (dB) per graph, pooled over the built-in held-out
	// text's sequences: searched, then absmax.
	want := map[string][2]float64{
		"embed": {86.48, 86.48}, "layer_00": {7.43, 5.70}, "layer_01": {11.96, 10.10},
		"layer_02": {18.07, 13.90}, "layer_03": {22.62, 19.50}, "head": {42.26, 42.26},
		"layer_00_prefill": {6.09, 4.41}, "layer_01_prefill": {9.02, 7.51},
		"layer_02_prefill": {15.43, 12.13}, "layer_03_prefill": {20.17, 17.41},
	}
	for _, e := range man.AllGraphs() {
		res := b.Graphs[e.Name]
		if res == nil || res.SNR == nil {
			t.Fatalf("%s: %+v", e.Name, res)
		}
		t.Logf("%s: simulated %.2f dB, absmax grids %.2f dB, search %+v", e.Name, *res.SNR, *br.Graphs[e.Name].SNR, res.Search)
		if w, ok := want[e.Name]; ok {
			if math.Abs(*res.SNR-w[0]) > 0.02 || math.Abs(*br.Graphs[e.Name].SNR-w[1]) > 0.02 {
				t.Errorf("%s: %.2f dB searched, %.2f absmax; want %.2f, %.2f", e.Name, *res.SNR, *br.Graphs[e.Name].SNR, w[0], w[1])
			}
		}
		if e.Kind == onnxgraph.KindLayer && *res.SNR <= *br.Graphs[e.Name].SNR {
			t.Errorf("%s: searched grids %.2f dB, not above absmax's %.2f", e.Name, *res.SNR, *br.Graphs[e.Name].SNR)
		}
		dir := filepath.Join(out, e.Name+".aimet")
		rep, err := qnn.LintFile(filepath.Join(dir, e.Name+".onnx"), filepath.Join(dir, e.Name+".encodings"))
		if err != nil || rep.Errors+rep.Warnings != 0 {
			t.Errorf("%s: lint --encodings: %v %+v", e.Name, err, rep)
		}
		f := readEnc(t, out, e.Name)
		for _, p := range f.Params {
			bw := 8
			switch {
			case strings.HasSuffix(p.Name, "proj.weight_T"):
				bw = 4
			case p.Name == "model.embed_tokens.weight":
				bw = 16
			}
			if p.BW != bw || (bw == 4 && (p.EncType != qnn.PerChannel || p.Offset[0] != -8 || !p.IsSym)) {
				t.Errorf("%s %s: %d bits %s offset %d, want %d", e.Name, p.Name, p.BW, p.EncType, p.Offset[0], bw)
			}
		}
		for _, a := range f.Activations {
			kv := a.BW == 8
			if kv && (!a.IsSym || a.Offset[0] != -128) || !kv && a.BW != 16 {
				t.Errorf("%s %s: %d bits, symmetric %v, offset %d", e.Name, a.Name, a.BW, a.IsSym, a.Offset[0])
			}
			if strings.HasPrefix(a.Name, "past_") || strings.HasPrefix(a.Name, "present_") || strings.HasPrefix(a.Name, "new_") {
				if !kv {
					t.Errorf("%s %s: KV cache at %d bits", e.Name, a.Name, a.BW)
				}
			}
		}
		if e.Decode != "" {
			de := readEnc(t, out, e.Decode)
			for _, p := range f.Params {
				if w, _ := findEnc(de.Params, p.Name); !w.Same(p) {
					t.Errorf("%s parameter %s: not the decode graph's grid", e.Name, p.Name)
				}
			}
			if res.Search != nil {
				t.Errorf("%s: a prefill graph searched its own grids", e.Name)
			}
		} else if e.Kind == onnxgraph.KindLayer && (res.Search == nil || res.Search.Weights != 8 || res.Search.Rows != 17 || !(res.Search.GainDB > 0)) {
			t.Errorf("%s: weight search %+v, want 8 weights over 17 rows (16 observed positions and the calibration ones), a positive gain", e.Name, res.Search)
		}
	}
	st, err := os.Stat(filepath.Join(out, "layer_00.aimet", "layer_00.encodings"))
	if err != nil || st.Size() != 108212 {
		t.Errorf("layer_00.encodings: %v, %d bytes, want 108212", err, st.Size())
	}
}
