package keepfloat

import (
	"context"
	"math"
	"slices"
	"testing"

	"sparkconv/calib"
	"sparkconv/convert"
	"sparkconv/dtype"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/spark"
)

// TestChoose: every unit of the tiny fixture is measured, the kept ones
// are the costliest, and the measurement leaves the model as it was:
// measuring the kept unit again gives the same divergence, and the float
// model against itself gives 0.
func TestChoose(t *testing.T) {
	dir := fixturestest.Tiny(t, false)
	for _, c := range []struct {
		name   string
		format convert.Format
	}{
		{"w8a8", convert.W8A8{}},
		{"gptq", convert.W4A8{Group: 64}},
	} {
		t.Run(c.name, func(t *testing.T) {
			keep, all, err := Choose(context.Background(), dir, Options{Count: 3, Tokens: 512, Format: c.format})
			if err != nil {
				t.Fatal(err)
			}
			cfg, _ := spark.LoadConfig(dir)
			if len(all) != 4*cfg.NumLayers || len(keep.Units) != 3 {
				t.Fatalf("%d measured, %d kept", len(all), len(keep.Units))
			}
			for i, m := range all {
				if !(m.KLD > 0) || math.IsInf(m.KLD, 0) || i > 0 && m.KLD > all[i-1].KLD {
					t.Fatalf("measured %v: want positive divergences, costliest first", all)
				}
			}
			for i, u := range keep.Units {
				if u.String() != all[i].Unit.String() {
					t.Errorf("kept %s, the %dth costliest is %s", u, i, all[i].Unit)
				}
			}
			if keep.Record["format"] != c.name || keep.Record["count"] != 3 {
				t.Errorf("record %v", keep.Record)
			}
			// The measurement restores every unit it quantized.
			sm, err := spark.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer sm.Close()
			chunks, _, _, err := text(sm, dir, Options{Tokens: 512})
			if err != nil {
				t.Fatal(err)
			}
			r := newRun(t, sm, ruleOf(c.format, dtype.BF16), chunks)
			again, err := r.cost(all[0].Unit)
			if err != nil {
				t.Fatal(err)
			}
			if rel := math.Abs(again-all[0].KLD) / all[0].KLD; rel > 1e-6 {
				t.Errorf("%s measured again: %g, first %g", all[0].Unit, again, all[0].KLD)
			}
			x := make([][]float32, len(chunks))
			for k := range chunks {
				x[k] = slices.Clone(r.xs[0][k])
				for i := range cfg.NumLayers {
					if _, _, err := r.m.ForwardLayer(i, x[k], len(chunks[k].IDs), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			lp, err := r.logProbs(x)
			if err != nil {
				t.Fatal(err)
			}
			if d := meanKLD(r.ref, lp, cfg.VocabSize); d > 1e-9 {
				t.Errorf("float model after the measurements: KLD %g from the reference", d)
			}
		})
	}
}

// TestChooseRefusesCount: 0 units or more than the model has are refused.
func TestChooseRefusesCount(t *testing.T) {
	dir := fixturestest.Tiny(t, false)
	for _, n := range []int{0, 17, -1} {
		if _, _, err := Choose(context.Background(), dir, Options{Count: n, Tokens: 256, Format: convert.W8A8{}}); err == nil {
			t.Errorf("--keep-float %d accepted on a 16-unit model", n)
		}
	}
}

// TestMeanKLD against sums done by hand.
func TestMeanKLD(t *testing.T) {
	ln := func(p ...float64) []float32 {
		out := make([]float32, len(p))
		for i, v := range p {
			out[i] = float32(math.Log(v))
		}
		return out
	}
	ref := append(ln(0.5, 0.5), ln(0.9, 0.1)...)
	got := append(ln(0.25, 0.75), ln(0.9, 0.1)...)
	want := (0.5*math.Log(0.5/0.25) + 0.5*math.Log(0.5/0.75)) / 2
	if d := meanKLD(ref, got, 2); math.Abs(d-want) > 1e-6 {
		t.Errorf("meanKLD = %g, want %g", d, want)
	}
	v := []float32{1, 2, 3}
	logSoftmax(v)
	var s float64
	for _, x := range v {
		s += math.Exp(float64(x))
	}
	if math.Abs(s-1) > 1e-6 || math.Abs(float64(v[2]-v[1])-1) > 1e-6 {
		t.Errorf("logSoftmax: %v", v)
	}
}

// newRun is a measurement's state on sm.
func newRun(t *testing.T, sm *spark.Model, f rule, chunks []calib.Chunk) *run {
	t.Helper()
	r, err := start(sm, f, chunks)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRuleOf: a format's keep-float rule is its grid and its reader's
// input rule, and describes itself as it always has (config.json records
// the sentence).
func TestRuleOf(t *testing.T) {
	for _, c := range []struct {
		f    convert.Format
		act  dtype.DType
		want string
		int8 forward.Int8Rule
	}{
		{convert.W8A8{}, dtype.BF16, "int8 per channel, round to nearest", forward.Int8Dynamic},
		{convert.W4A8{Group: 64}, dtype.BF16, "int4 symmetric group 64, MSE-searched scales, round to nearest", forward.Int8VLLMRow},
		{convert.W4A8{Group: 32, NoSearch: true}, dtype.F16, "int4 symmetric group 32, plain scales, round to nearest", forward.NoInt8},
	} {
		f := ruleOf(c.f, c.act)
		if f.Grid != c.f.Grid(c.act) || f.Act.DType != c.act || f.Act.Int8 != c.int8 || f.describe() != c.want+"; inputs "+f.Act.String() {
			t.Errorf("%s %s: %+v, %q", c.f.Name(), c.act, f, f.describe())
		}
	}
}
