package qnnbundle

import (
	"math"
	"path/filepath"
	"testing"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/ortrun"
	"sparkconv/ortrun/orttest"
	"sparkconv/qnn"
	"sparkconv/quant"
)

// TestPosSNR: every position weighs the same whatever its norm (a sink's
// residual is thousands of times an ordinary token's), the worst position
// is named, and an exact reproduction is +Inf.
func TestPosSNR(t *testing.T) {
	for _, c := range []struct {
		name  string
		stats []quant.ErrStats // per position
		want  float64          // dB
		worst float64
		pos   int
	}{
		{"equal weight", []quant.ErrStats{{SumSq: 1e8, SumErrSq: 1e4}, {SumSq: 1, SumErrSq: 0.1}}, -10 * math.Log10((1e-4+0.1)/2), 10, 1},
		{"one position", []quant.ErrStats{{SumSq: 4, SumErrSq: 0.004}}, 30, 30, 0},
		{"exact", []quant.ErrStats{{SumSq: 4}, {SumSq: 2}}, math.Inf(1), math.Inf(1), 0},
	} {
		var a posSNR
		for p, s := range c.stats {
			a.add(p, s)
		}
		got, worst := float64(a.db()), -10*math.Log10(a.worst)
		if math.Abs(got-c.want) > 1e-9 && !(math.IsInf(got, 1) && math.IsInf(c.want, 1)) {
			t.Errorf("%s: %v dB, want %v", c.name, got, c.want)
		}
		if (math.Abs(worst-c.worst) > 1e-9 && !(math.IsInf(worst, 1) && math.IsInf(c.worst, 1))) || a.worstPos != c.pos {
			t.Errorf("%s: worst %v dB at %d, want %v at %d", c.name, worst, a.worstPos, c.worst, c.pos)
		}
	}
}

// TestFoldWeightsSameNumbers: the QDQ graph with its weights'
// DequantizeLinear folded gives ONNX Runtime's outputs of the graph as
// written to within the order of a sum (ONNX Runtime prepacks a constant
// weight and sums in another order; an activation grid's rounding then
// flips a step now and then: 74 dB at worst here, against the 20-50 dB of
// the quantization the simulation measures), for every graph and int8 and
// int16 weight codes, per channel and per tensor, and folds exactly the
// parameters.
func TestFoldWeightsSameGraph(t *testing.T) {
	orttest.Init(t)
	worst := math.Inf(1)
	defer func() { t.Logf("folded against written: %.1f dB at worst", worst) }()
	for _, prec := range []qnn.Precision{qnn.Precisions[0], qnn.Precisions[1]} {
		_, out, man, held := miniBundle(t, onnxgraph.ExportOptions{Context: 24}, prec)
		for _, e := range man.Graphs {
			path := filepath.Join(out, QDQDir, e.File)
			m, err := onnxio.ReadModelWithData(path)
			if err != nil {
				t.Fatal(err)
			}
			n, err := FoldWeights(m)
			enc := readEnc(t, out, e.Name)
			if err != nil || n != len(enc.Params) {
				t.Fatalf("%s %s: folded %d nodes (%v), %d parameters", prec.Name, e.Name, n, err, len(enc.Params))
			}
			inits := map[string]bool{}
			for _, w := range m.GetGraph().GetInitializer() {
				inits[w.GetName()] = true
			}
			for _, node := range m.GetGraph().GetNode() {
				if node.GetOpType() == "DequantizeLinear" && inits[node.Input[0]] {
					t.Fatalf("%s %s: %s left", prec.Name, e.Name, node.GetName())
				}
			}
			opt := ortrun.SessionOptions{Threads: 1, Optimize: SimOptimize}
			written, err := ortrun.OpenSession(path, opt)
			if err != nil {
				t.Fatal(err)
			}
			folded, err := openFolded(path, opt)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range held[e.Name] {
				a, err := written.Run(s.Feeds)
				if err != nil {
					t.Fatal(err)
				}
				b, err := folded.Run(s.Feeds)
				if err != nil {
					t.Fatal(err)
				}
				for name, v := range a {
					d := forward.Compare(v.F32, b[name].F32)
					worst = min(worst, d.SNR)
					if d.SNR < 60 {
						t.Fatalf("%s %s position %d: %s folded at %.1f dB of the graph as written", prec.Name, e.Name, s.Pos, name, d.SNR)
					}
				}
			}
			written.Close()
			folded.Close()
		}
	}
}
