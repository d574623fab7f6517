package qnnbundle

import (
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"
	"sparkconv/ortrun/orttest"
	"sparkconv/qnn"
)

// TestBundleW4A16LPBQ bundles the tiny model's export at w4a16-lpbq: every
// layer MatMul weight gets an LPBQ entry (4-bit codes in blocks of 64
// input rows, bw 8, integer scales in 1..16) that lints clean, the head
// stays 8-bit per channel and the table 16-bit; the QDQ graph holds
// exactly the codes the entry describes (int8 q x int scale, dequantized
// per channel); the prefill graphs take the decode graphs' entries, and,
// rounded to nearest, every layer simulates above the per-channel w4a16
// build. With Solve (GPTQ's codes on the grid, w4a16-lpbq's default) the
// bundled graphs, the prefill graphs' too, hold the solved weights, which
// lie on their grids.
func TestBundleW4A16LPBQ(t *testing.T) {
	orttest.Init(t)
	_, man, build := tinyPrefillBundles(t)
	prec, err := qnn.ParsePrecision("w4a16-lpbq")
	if err != nil {
		t.Fatal(err)
	}
	perChannel, _ := qnn.ParsePrecision("w4a16")
	pc, _ := build(perChannel)
	if !prec.Solve {
		t.Fatal("w4a16-lpbq does not solve its codes")
	}
	rtn := prec
	rtn.Solve = false
	for _, p := range []qnn.Precision{rtn, prec} {
		b, out := build(p)
		if b.Recipe == nil || !strings.HasPrefix(b.Recipe.WeightGrid, "LPBQ") || strings.Contains(b.Recipe.WeightGrid, "GPTQ") != p.Solve {
			t.Errorf("solve %v: recipe %+v", p.Solve, b.Recipe)
		}
		for _, e := range man.AllGraphs() {
			checkLPBQGraph(t, out, e, b.Graphs[e.Name], p.Solve)
			snr, pcSNR := *b.Graphs[e.Name].SNR, *pc.Graphs[e.Name].SNR
			t.Logf("solve %v %s: LPBQ %.2f dB, per channel %.2f dB, search %+v", p.Solve, e.Name, snr, pcSNR, b.Graphs[e.Name].Search)
			if !p.Solve && e.Kind == onnxgraph.KindLayer && snr <= pcSNR {
				t.Errorf("%s: LPBQ %.2f dB, not above per channel's %.2f", e.Name, snr, pcSNR)
			}
		}
	}
}

// checkLPBQGraph checks one graph of a w4a16-lpbq bundle: lint, the
// entries, the codes, the prefill graph's ties, the search record.
func checkLPBQGraph(t *testing.T, out string, e onnxgraph.GraphEntry, res *GraphResult, solved bool) {
	t.Helper()
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
		checkLPBQCodes(t, src, qdq, p, solved)
	}
	solvedWant := 0
	if solved {
		solvedWant = 8
	}
	if e.Decode != "" {
		de := readEnc(t, out, e.Decode)
		for _, p := range f.Params {
			if w, _ := findEnc(de.Params, p.Name); !w.Same(p) {
				t.Errorf("%s parameter %s: not the decode graph's grid", e.Name, p.Name)
			}
		}
	} else if e.Kind == onnxgraph.KindLayer && (res.Search == nil || res.Search.Blocked != 8 || res.Search.Solved != solvedWant || !(res.Search.GainDB > 0)) {
		t.Errorf("%s: weight search %+v, want 8 LPBQ weights, %d solved, and a positive gain over min-max LPBQ", e.Name, res.Search, solvedWant)
	}
}

// checkLPBQCodes holds the bundled graph's weight and the QDQ graph's
// stored one to the LPBQ entry: a solved weight lies on the grid, the QDQ
// graph's int8 codes are qnn.BlockScales' codes of the bundled weight,
// and its scales the entry's channel scales.
func checkLPBQCodes(t *testing.T, src, qdq *onnxpb.ModelProto, e qnn.Encoding, solved bool) {
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
		if solved && want[i] != w[i] {
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
