package eval

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sparkconv/convert"
	"sparkconv/corpus"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/tokenizer"
)

// TestScoreIndependent checks KLD, NLL, Δp and same-top-1 of Score against
// softmaxes computed here in float64 straight from the logits.
func TestScoreIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const V = 257
	for trial := range 50 {
		a, b := make([]float32, V), make([]float32, V)
		for i := range a {
			a[i] = float32(rng.NormFloat64() * 3)
			b[i] = a[i] + float32(rng.NormFloat64()*0.3*float64(trial%5))
		}
		next := rng.IntN(V)
		la, lb := make([]float32, V), make([]float32, V)
		ta, tb := LogSoftmax(la, a), LogSoftmax(lb, b)
		got := Score(la, lb, ta, tb, next, 7)
		p, q := softmax64(a), softmax64(b)
		var kld float64
		for i := range p {
			kld += p[i] * math.Log(p[i]/q[i])
		}
		if math.Abs(got.KLD-kld) > 1e-6*max(1, kld)+1e-7 {
			t.Errorf("trial %d: KLD %.9g, want %.9g", trial, got.KLD, kld)
		}
		if math.Abs(got.NLLBase+math.Log(p[next])) > 1e-5 || math.Abs(got.NLL+math.Log(q[next])) > 1e-5 {
			t.Errorf("trial %d: nll %g %g, want %g %g", trial, got.NLLBase, got.NLL, -math.Log(p[next]), -math.Log(q[next]))
		}
		if math.Abs(got.DeltaP-(q[next]-p[next])) > 1e-6 {
			t.Errorf("trial %d: Δp %g, want %g", trial, got.DeltaP, q[next]-p[next])
		}
		if got.SameTop1 != (argmax(p) == argmax(q)) || got.Pos != 7 {
			t.Errorf("trial %d: same top-1 %v", trial, got.SameTop1)
		}
	}
}

func softmax64(x []float32) []float64 {
	out := make([]float64, len(x))
	var sum float64
	for i, v := range x {
		out[i] = math.Exp(float64(v))
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// TestSummarizeIndependent checks the statistics against a second
// computation: two-pass variances, perplexities as geometric means of
// probabilities, percentiles by rank on a sorted copy.
func TestSummarizeIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 1001
	toks := make([]Token, n)
	for i := range toks {
		pb, pq := 0.05+0.9*rng.Float64(), 0.05+0.9*rng.Float64()
		toks[i] = Token{NLLBase: -math.Log(pb), NLL: -math.Log(pq), KLD: rng.ExpFloat64() * 0.01, SameTop1: rng.Float64() < 0.9, DeltaP: pq - pb}
	}
	s := Summarize(toks)
	var gb, gq float64 = 0, 0
	for _, tk := range toks {
		gb += math.Log(math.Exp(-tk.NLLBase))
		gq += math.Log(math.Exp(-tk.NLL))
	}
	pplB, ppl := 1/math.Exp(gb/n), 1/math.Exp(gq/n)
	near := func(what string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol*max(1, math.Abs(want)) {
			t.Errorf("%s = %.12g, want %.12g", what, got, want)
		}
	}
	near("ppl_base", s.PPLBase, pplB, 1e-10)
	near("ppl", s.PPL, ppl, 1e-10)
	near("ppl_ratio", s.PPLRatio, ppl/pplB, 1e-10)
	twoPass := func(f func(Token) float64) (mean, se float64) {
		for _, tk := range toks {
			mean += f(tk)
		}
		mean /= n
		var ss float64
		for _, tk := range toks {
			ss += (f(tk) - mean) * (f(tk) - mean)
		}
		return mean, math.Sqrt(ss / n / (n - 1))
	}
	m, se := twoPass(func(tk Token) float64 { return tk.KLD })
	near("kld.mean", s.KLD.Mean, m, 1e-12)
	near("kld.stderr", s.KLD.Stderr, se, 1e-9)
	m, se = twoPass(func(tk Token) float64 { return tk.NLL - tk.NLLBase })
	near("ln_ppl_ratio.mean", s.LnPPLRatio.Mean, m, 1e-12)
	near("ln_ppl_ratio.stderr", s.LnPPLRatio.Stderr, se, 1e-9)
	near("ln ratio = log(ppl ratio)", s.LnPPLRatio.Mean, math.Log(s.PPLRatio), 1e-9)
	sorted := make([]float64, n)
	for i, tk := range toks {
		sorted[i] = tk.KLD
	}
	slices.Sort(sorted)
	// n = 1001: rank fraction*(n-1) is an integer for 0.5, 0.9, 0.99, 0.999
	near("median", s.KLD.Median, sorted[500], 0)
	near("p90", s.KLD.P90, sorted[900], 0)
	near("p99", s.KLD.P99, sorted[990], 0)
	near("p999", s.KLD.P999, sorted[999], 0)
	near("max", s.KLD.Max, sorted[1000], 0)
	same, dp, dp2 := 0.0, 0.0, 0.0
	for _, tk := range toks {
		if tk.SameTop1 {
			same++
		}
		dp += tk.DeltaP
		dp2 += tk.DeltaP * tk.DeltaP
	}
	near("same_top1", s.SameTop1, same/n, 1e-12)
	near("same_top1_err", s.SameTop1Err, math.Sqrt(same/n*(1-same/n)/(n-1)), 1e-12)
	near("delta_p.mean", s.DeltaP.Mean, dp/n, 1e-12)
	near("delta_p.rms", s.DeltaP.RMS, math.Sqrt(dp2/n), 1e-12)
	if s.TokensScored != n {
		t.Errorf("tokens_scored %d", s.TokensScored)
	}
}

// TestPercentileInterpolates: between ranks the value is interpolated.
func TestPercentileInterpolates(t *testing.T) {
	v := []float64{0, 10, 20, 30}
	for _, c := range []struct{ f, want float64 }{{0, 0}, {0.5, 15}, {0.9, 27}, {1, 30}, {1.5, 30}} {
		if got := Percentile(v, c.f); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Percentile(%g) = %g, want %g", c.f, got, c.want)
		}
	}
}

// tinyText tokenizes the built-in held-out text with the tiny fixture's
// tokenizer.
func tinyText(t *testing.T, dir string) *Text {
	t.Helper()
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := TextFromSamples([]byte(corpus.HeldOut), corpus.HeldOutName, false, tok, 16)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func openModel(t *testing.T, dir string) (Model, func()) {
	t.Helper()
	m, err := convert.OpenForward(dir, forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return Forward{m}, func() { m.Close() }
}

// TestIdenticalBuild: the base against itself scores KLD 0, every top-1
// the same, PPL ratio 1 and every greedy continuation reproduced; a
// second run reuses the base file and gives the same numbers; a W8A8
// build scores worse.
func TestIdenticalBuild(t *testing.T) {
	dir := fixturestest.Tiny(t, false)
	text := tinyText(t, dir)
	text.Stream = text.Stream[:8*64+10] // 8 windows (and a partial one, dropped)
	opt := Settings{Ctx: 64, Prompts: 4, GenTokens: 8}
	basePath := filepath.Join(t.TempDir(), "base.safetensors")
	open := func() (Model, func(), error) { m, c := openModel(t, dir); return m, c, nil }
	b, done, err := EnsureBase(basePath, open, text, opt, 512)
	if err != nil {
		t.Fatal(err)
	}
	build, closeBuild := openModel(t, dir)
	r, err := Evaluate(b, build, opt)
	closeBuild()
	done()
	if err != nil {
		t.Fatal(err)
	}
	first, count := Scored(64)
	if r.Window != 8 || r.TokensScored != r.Window*count || first != 32 || count != 31 {
		t.Errorf("%d windows, %d tokens scored", r.Window, r.TokensScored)
	}
	if r.KLD.Mean != 0 || r.KLD.Max != 0 || r.SameTop1 != 1 || r.PPLRatio != 1 || r.DeltaP.RMS != 0 {
		t.Errorf("identical build: %+v", r.Stats)
	}
	if len(r.LayerRelErr) != 4 || slices.ContainsFunc(r.LayerRelErr, func(e float64) bool { return e != 0 }) {
		t.Errorf("identical build layer errors %v", r.LayerRelErr)
	}
	if r.Greedy.Prompts != 4 || r.Greedy.Exact != 4 || r.Greedy.PrefixKept != 1 {
		t.Errorf("identical build greedy: %+v", r.Greedy)
	}
	if r.PPLBase < 2 || r.PPLBase > 2*512 { // random weights: about the vocabulary
		t.Errorf("ppl_base %g", r.PPLBase)
	}
	// the base file is reused: the base model is not opened again
	b2, done2, err := EnsureBase(basePath, func() (Model, func(), error) {
		t.Fatal("base recomputed although the file exists")
		return nil, nil, nil
	}, text, opt, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer done2()
	q := filepath.Join(t.TempDir(), "w8a8")
	if _, err := convert.Convert(t.Context(), convert.Options{Model: dir, Out: q, Quiet: true}, convert.W8A8{}, nil); err != nil {
		t.Fatal(err)
	}
	qm, closeQ := openModel(t, q)
	defer closeQ()
	rq, err := Evaluate(b2, qm, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tiny W8A8: KLD %.5f ± %.5f (p99 %.4f, max %.4f), same top-1 %.3f, PPL %.3f / %.3f = %.4f, greedy %d/%d exact, %.2f kept",
		rq.KLD.Mean, rq.KLD.Stderr, rq.KLD.P99, rq.KLD.Max, rq.SameTop1, rq.PPL, rq.PPLBase, rq.PPLRatio, rq.Greedy.Exact, rq.Greedy.Prompts, rq.Greedy.PrefixKept)
	// W8A8 on N(0, 0.02) rows: about 40 dB per weight; the residual stream
	// keeps most of it, less layer by layer
	for i, e := range rq.LayerRelErr {
		if snr := -20 * math.Log10(e); snr < 15 || snr > 60 {
			t.Errorf("W8A8 layer %d output SNR %.1f dB", i, snr)
		}
	}
	t.Logf("W8A8 layer output relative errors %.3g", rq.LayerRelErr)
	if !(rq.KLD.Mean > 0) || rq.KLD.Mean > 0.5 || rq.SameTop1 < 0.5 || rq.PPLBase != r.PPLBase {
		t.Errorf("W8A8: %+v", rq.Stats)
	}
	// a stale base file is refused, naming the mismatch
	other := opt
	other.Ctx = 32
	if _, _, err := EnsureBase(basePath, open, text, other, 512); err == nil || !strings.Contains(err.Error(), "--ctx 64, not 32") {
		t.Errorf("stale base: %v", err)
	}
}
