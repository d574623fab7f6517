package qnnbundle

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"
	"sparkconv/ortrun/orttest"
	"sparkconv/qnn"
)

// TestBundleW4A16LPBQ bundles the tiny model's export at w4a16-lpbq: every
// layer MatMul weight gets an LPBQ entry (4-bit codes in blocks of 64
// input rows, bw 8, integer scales in 1..16) that lints clean, the head
// stays 8-bit per channel and the table 16-bit; the bundled graphs hold
// the solved weights, on their grids, and the QDQ graph exactly the codes
// the entry describes (int8 q x int scale, dequantized per channel); the
// prefill graphs take the decode graphs' entries and weights, and every
// layer simulates above the per-channel w4a16 build.
func TestBundleW4A16LPBQ(t *testing.T) {
	orttest.Init(t)
	model := fixturestest.Tiny(t, false)
	export := exporttest.Export(t, model, onnxgraph.ExportOptions{Context: 64, Prefill: 16})
	man, err := onnxgraph.ReadManifest(export)
	if err != nil {
		t.Fatal(err)
	}
	build := func(name string) (*Bundle, string) {
		prec, err := qnn.ParsePrecision(name)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "qnn")
		b, err := Build(context.Background(), Options{Model: model, Export: export, Out: out, Precision: prec,
			Positions: 3, Observe: 16, MaskClip: qnn.MaskClip, Headroom: qnn.Headroom, Threads: 1, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		return b, out
	}
	b, out := build("w4a16-lpbq")
	pc, _ := build("w4a16")
	if b.Recipe == nil || !strings.HasPrefix(b.Recipe.WeightGrid, "LPBQ") {
		t.Errorf("recipe %+v", b.Recipe)
	}
	for _, e := range man.AllGraphs() {
		res := b.Graphs[e.Name]
		t.Logf("%s: LPBQ %.2f dB, per channel %.2f dB, search %+v", e.Name, *res.SNR, *pc.Graphs[e.Name].SNR, res.Search)
		if e.Kind == onnxgraph.KindLayer && *res.SNR <= *pc.Graphs[e.Name].SNR {
			t.Errorf("%s: LPBQ %.2f dB, not above per channel's %.2f", e.Name, *res.SNR, *pc.Graphs[e.Name].SNR)
		}
		dir := filepath.Join(out, e.Name+".aimet")
		rep, err := qnn.LintFile(filepath.Join(dir, e.Name+".onnx"), filepath.Join(dir, e.Name+".encodings"))
		if err != nil || rep.Errors+rep.Warnings != 0 {
			t.Errorf("%s: lint --encodings: %v %+v", e.Name, err, rep)
		}
		f := readEnc(t, out, e.Name)
		src, err := onnxio.ReadModelWithData(filepath.Join(dir, e.Name+".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		qdq, err := onnxio.ReadModelWithData(filepath.Join(out, QDQDir, e.File))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Params {
			layer := strings.HasSuffix(p.Name, "proj.weight_T")
			if layer != (p.EncType == qnn.LPBQ) {
				t.Errorf("%s %s: %s %d bits", e.Name, p.Name, p.EncType, p.BW)
			}
			if !layer {
				continue
			}
			if p.CompressedBW != 4 || p.BW != 8 || p.BlockSize != 64 || p.Offset[0] != -128 {
				t.Errorf("%s %s: %+v", e.Name, p.Name, p)
			}
			checkLPBQCodes(t, src, qdq, p)
		}
		if e.Decode != "" {
			de := readEnc(t, out, e.Decode)
			for _, p := range f.Params {
				if w, _ := findEnc(de.Params, p.Name); !w.Same(p) {
					t.Errorf("%s parameter %s: not the decode graph's grid", e.Name, p.Name)
				}
			}
		} else if e.Kind == onnxgraph.KindLayer && (res.Search == nil || res.Search.Blocked != 8 || res.Search.Solved != 8 || !(res.Search.GainDB > 0)) {
			t.Errorf("%s: weight search %+v, want 8 LPBQ weights and a positive gain over min-max LPBQ", e.Name, res.Search)
		}
	}
}

// checkLPBQCodes holds the bundled graph's weight and the QDQ graph's
// stored one to the LPBQ entry: the bundled weight lies on the grid (it
// is GPTQ's solved weight), the QDQ graph's int8 codes are
// qnn.BlockScales' codes of it, and its scales the entry's channel scales.
func checkLPBQCodes(t *testing.T, src, qdq *onnxpb.ModelProto, e qnn.Encoding) {
	t.Helper()
	var w []float32
	var dims []int64
	for _, in := range src.GetGraph().GetInitializer() {
		if in.GetName() == e.Name {
			v, err := tensorFloat32(in)
			if err != nil {
				t.Fatal(err)
			}
			w, dims = v, in.GetDims()
		}
	}
	k, n := int(dims[0]), int(dims[1])
	bs, err := qnn.BlockScalesOf(e, k, n)
	if err != nil {
		t.Fatal(err)
	}
	want := bs.Dequantize(w)
	for i := range w {
		if want[i] != w[i] {
			t.Fatalf("%s[%d]: the bundled weight %v is off its LPBQ grid (%v): not the solved weights", e.Name, i, w[i], want[i])
		}
	}
	var codes []byte
	var scale []float32
	for _, in := range qdq.GetGraph().GetInitializer() {
		switch in.GetName() {
		case e.Name + "/q":
			codes = in.GetRawData()
		case e.Name + "/scale":
			scale = in.GetFloatData()
		}
	}
	if len(codes) != k*n || len(scale) != n {
		t.Fatalf("%s: QDQ graph holds %d codes and %d scales", e.Name, len(codes), len(scale))
	}
	for i, c := range codes {
		if got := float32(int8(c)) * scale[i%n]; got != want[i] {
			t.Fatalf("%s[%d]: QDQ graph dequantizes to %v, the entry to %v", e.Name, i, got, want[i])
		}
	}
}
