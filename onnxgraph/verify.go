package onnxgraph

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"sparkconv/forward"
	"sparkconv/quant"
)

// Verification bars (per graph, every output).
const (
	BarFloat32 = 100.0 // dB
	BarFloat16 = 55.0  // dB
)

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// Steps is the number of decode steps; 0 means sliding_window + 8, so
	// every sliding ring wraps (capped at context - 1).
	Steps int
	// Seed picks the token history and the cache garbage.
	Seed    uint64
	Threads int
	// Optimize is ONNX Runtime's graph optimization level (see
	// SessionOptions). "" means "all" for float32 exports and "extended"
	// for float16 ones: at "all", ONNX Runtime 1.30's CPU provider fuses
	// the float16 RMSNorm pattern into SimplifiedLayerNormalization with
	// epsilon 1e-5 instead of the graph's constant (1e-6 for Spark), which
	// costs ~30 dB on small activations and is not the graph's error.
	Optimize string
	// KeyGarbage and ValueGarbage fill never-written slots; 0 means 50 and
	// 1000 (finite, far outside real activations, hidden only by the mask).
	KeyGarbage, ValueGarbage float64
}

// DB is a decibel value whose JSON form is a number, or "inf" for an exact
// match.
type DB float64

// MarshalJSON writes +Inf as "inf" (JSON has no infinity).
func (d DB) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(d), 1) {
		return []byte(`"inf"`), nil
	}
	if math.IsInf(float64(d), -1) || math.IsNaN(float64(d)) {
		return []byte(`"-inf"`), nil
	}
	return json.Marshal(math.Round(float64(d)*100) / 100)
}

// Metric is one output's agreement with the reference over all steps.
type Metric struct {
	SNR    DB      `json:"snr_db"`
	MaxAbs float64 `json:"max_abs_err"`
	MaxRef float64 `json:"max_abs_ref"`
}

// GraphReport is one graph's result.
type GraphReport struct {
	File    string            `json:"file"`
	Kind    string            `json:"kind"`
	Outputs map[string]Metric `json:"outputs"`
	SNR     DB                `json:"snr_db"` // the lowest over outputs
	MaxAbs  float64           `json:"max_abs_err"`
	Pass    bool              `json:"pass"`
}

// VerifyReport is the whole result.
type VerifyReport struct {
	Export      string        `json:"export"`
	ORTOptimize string        `json:"ort_optimize"`
	DType       string        `json:"dtype"`
	ORTVersion  string        `json:"ort_version"`
	Steps       int           `json:"steps"`
	BarDB       float64       `json:"bar_db"`
	Graphs      []GraphReport `json:"graphs"`
	Top1Agree   int           `json:"top1_agree"`
	Top5Agree   int           `json:"top5_agree"`
	ShiftErrors int           `json:"roll_shift_errors"`
	// Chain is the head's logits when ORT runs on its own outputs the whole
	// way (errors compound; reported, not gated).
	Chain    Metric   `json:"chain_logits"`
	Pass     bool     `json:"pass"`
	Failures []string `json:"failures,omitempty"`
}

// acc accumulates one output's errors over the steps.
type acc struct {
	s      quant.ErrStats
	maxRef float64
}

func (a *acc) add(ref, got []float32) {
	a.s.Merge(quant.Compare(ref, got))
	for _, v := range ref {
		a.maxRef = math.Max(a.maxRef, math.Abs(float64(v)))
	}
}

func (a *acc) metric() Metric {
	return Metric{SNR: DB(a.s.SNRdB()), MaxAbs: a.s.MaxAbs, MaxRef: a.maxRef}
}

// verifier holds the teacher-forced state: the reference's hidden states
// and caches are the truth; each ORT graph gets exactly the reference's
// inputs (caches with garbage behind the mask) so errors do not compound.
type verifier struct {
	ref    *forward.Model
	run    *Runner
	chain  *Runner
	dt     DType
	caches map[int]*forward.LayerCache
	accs   map[string]map[string]*acc // file -> output -> errors
	report *VerifyReport
}

// Verify runs every graph of the export in dir in ONNX Runtime against the
// float32 reference forward of the same checkpoint, step by step over a
// random token history, and checks the bars.
func Verify(ref *forward.Model, dir string, o VerifyOptions) (*VerifyReport, error) {
	if o.KeyGarbage == 0 {
		o.KeyGarbage = 50
	}
	if o.ValueGarbage == 0 {
		o.ValueGarbage = 1000
	}
	if o.Optimize == "" {
		o.Optimize = "all"
		if man, err := ReadManifest(dir); err == nil && man.DType == Float16.String() {
			o.Optimize = "extended"
		}
	}
	ropt := RunnerOptions{SessionOptions: SessionOptions{Threads: o.Threads, Optimize: o.Optimize}, KeyGarbage: o.KeyGarbage, ValueGarbage: o.ValueGarbage, Seed: o.Seed}
	run, err := OpenRunner(dir, ropt)
	if err != nil {
		return nil, err
	}
	defer run.Close()
	if err := checkAgainstConfig(run.Manifest, ref); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	fileErrs, err := run.CheckFiles()
	if err != nil {
		return nil, err
	}
	chain := run.Clone() // ORT on its own outputs, same sessions
	man := run.Manifest
	c := ref.Cfg
	steps := o.Steps
	if steps <= 0 {
		steps = c.SlidingWindow + 8
	}
	steps = min(steps, man.Context-1)
	v := &verifier{ref: ref, run: run, chain: chain, dt: run.dt, caches: map[int]*forward.LayerCache{}, accs: map[string]map[string]*acc{}}
	v.report = &VerifyReport{Export: dir, ORTOptimize: o.Optimize, DType: man.DType, ORTVersion: ORTVersion(), Steps: steps, BarDB: BarFloat32}
	if v.dt == Float16 {
		v.report.BarDB = BarFloat16
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x70c3))
	for i, st := range run.states {
		lay := forward.Ring
		if st.Info.Layout == LayoutRoll {
			lay = forward.Roll
		}
		lc := forward.NewLayerCache(lay, st.KV, st.D, st.Info.CacheSlots)
		copy(lc.Key, st.Key) // the same garbage the runner starts with
		copy(lc.Value, st.Value)
		v.caches[i] = lc
	}
	chainLogits := &acc{}
	for p := range steps {
		id := rng.IntN(c.VocabSize)
		refLogits, err := v.step(id, p)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", p, err)
		}
		tr, err := chain.Step(int64(id), p)
		if err != nil {
			return nil, fmt.Errorf("step %d (chained): %w", p, err)
		}
		chainLogits.add(refLogits, tr.Logits)
	}
	v.report.Chain = chainLogits.metric()
	v.finish()
	for _, e := range fileErrs {
		v.report.Pass = false
		v.report.Failures = append(v.report.Failures, e)
	}
	return v.report, nil
}

// checkAgainstConfig compares every per-layer key with the model.
func checkAgainstConfig(man *Manifest, ref *forward.Model) error {
	c := ref.Cfg
	seen := map[int]bool{}
	for _, g := range man.Graphs {
		for _, li := range g.LayerInfos() {
			if li.Layer >= c.NumLayers || seen[li.Layer] {
				return fmt.Errorf("%s: layer %d out of range or repeated", g.File, li.Layer)
			}
			seen[li.Layer] = true
			want := string(c.LayerTypes[li.Layer])
			if li.LayerType != want || li.RotaryDims != c.RotaryDims(li.Layer) || li.RopeTheta != c.RoPEFor(li.Layer).Theta || li.CacheSlots != c.CacheSlots(li.Layer, man.Context) {
				return fmt.Errorf("%s: layer %d keys %+v do not match the model (%s, R %d, theta %g, C %d)", g.File, li.Layer, li, want, c.RotaryDims(li.Layer), c.RoPEFor(li.Layer).Theta, c.CacheSlots(li.Layer, man.Context))
			}
		}
	}
	if len(seen) != c.NumLayers {
		return fmt.Errorf("export holds %d of the model's %d layers", len(seen), c.NumLayers)
	}
	return nil
}

func (v *verifier) acc(file, output string) *acc {
	m := v.accs[file]
	if m == nil {
		m = map[string]*acc{}
		v.accs[file] = m
	}
	a := m[output]
	if a == nil {
		a = &acc{}
		m[output] = a
	}
	return a
}

// step runs position p through every graph with reference inputs and
// returns the reference logits.
func (v *verifier) step(id, p int) ([]float32, error) {
	m, c := v.ref, v.ref.Cfg
	man := v.run.Manifest
	h := make([]float32, c.HiddenSize)
	if err := m.EmbedRow(h, id); err != nil {
		return nil, err
	}
	var embedFile, headFile string
	for _, g := range man.Graphs {
		switch g.Kind {
		case KindEmbed:
			embedFile = g.File
		case KindHead:
			headFile = g.File
		}
	}
	out, err := v.run.Session(embedFile).Run(map[string]Tensor{"input_ids": I64Tensor([]int64{1, 1}, []int64{int64(id)})})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", embedFile, err)
	}
	v.acc(embedFile, "hidden_out").add(h, out["hidden_out"].Floats())
	for _, g := range man.Graphs {
		if g.Kind != KindLayer && g.Kind != KindBlock {
			continue
		}
		if h, err = v.layerGraph(g, h, p); err != nil {
			return nil, fmt.Errorf("%s: %w", g.File, err)
		}
	}
	fn := m.FinalNorm(h)
	logits, err := m.Logits(fn, 1)
	if err != nil {
		return nil, err
	}
	out, err = v.run.Session(headFile).Run(map[string]Tensor{"hidden_in": FloatTensor(v.dt, []int64{1, 1, int64(c.HiddenSize)}, h)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", headFile, err)
	}
	got := out["logits"].Floats()
	v.acc(headFile, "logits").add(logits, got)
	if topK(logits, 1)[0] == topK(got, 1)[0] {
		v.report.Top1Agree++
	}
	if sameSet(topK(logits, 5), topK(got, 5)) {
		v.report.Top5Agree++
	}
	return logits, nil
}

// layerGraph runs one layer or block graph on the reference's inputs,
// compares its outputs with the reference layers and advances the
// reference caches. It returns the reference residual after the graph.
func (v *verifier) layerGraph(g GraphEntry, h []float32, p int) ([]float32, error) {
	c := v.ref.Cfg
	mv := float32(v.run.Manifest.MaskValue)
	feeds := map[string]Tensor{"hidden_in": FloatTensor(v.dt, []int64{1, 1, int64(c.HiddenSize)}, h)}
	type refOut struct{ k, v []float32 }
	refs := map[int]refOut{}
	x := h
	for _, li := range g.LayerInfos() {
		lc := v.caches[li.Layer]
		st := &CacheState{Info: li, KV: lc.KVHeads, D: lc.HeadDim, Key: lc.Key, Value: lc.Value, Written: lc.Filled}
		if li.Layout == LayoutRoll {
			st.Written = nil
			st.Filled = countTrue(lc.Filled)
		}
		for k, t := range st.Feeds(v.dt, p, mv, LayerSuffix(g.Kind, li.Layer)) {
			feeds[k] = t
		}
		out, k, val, err := v.ref.DecodeLayer(li.Layer, x, p, lc)
		if err != nil {
			return nil, err
		}
		refs[li.Layer] = refOut{k, val}
		x = out
	}
	got, err := v.run.Session(g.File).Run(feeds)
	if err != nil {
		return nil, err
	}
	v.acc(g.File, "hidden_out").add(x, got["hidden_out"].Floats())
	for _, li := range g.LayerInfos() {
		sfx := LayerSuffix(g.Kind, li.Layer)
		lc := v.caches[li.Layer]
		before := &CacheState{Info: li, KV: lc.KVHeads, D: lc.HeadDim, Key: append([]float32(nil), lc.Key...), Value: append([]float32(nil), lc.Value...), Written: make([]bool, li.CacheSlots)}
		k, val, err := before.Update(got, p, sfx)
		if err != nil {
			return nil, err
		}
		if li.Layout == LayoutRoll {
			v.report.ShiftErrors += shiftErrors(lc, got, sfx, v.dt)
		}
		v.acc(g.File, "key"+sfx).add(refs[li.Layer].k, k)
		v.acc(g.File, "value"+sfx).add(refs[li.Layer].v, val)
		lc.Update(p, refs[li.Layer].k, refs[li.Layer].v)
	}
	return x, nil
}

// shiftErrors counts slots of a roll graph's present_* that are not the
// input cache shifted by one (a copy: it must be exact, at the graph's
// precision).
func shiftErrors(lc *forward.LayerCache, out map[string]Tensor, sfx string, dt DType) int {
	C, D, KV := lc.Slots, lc.HeadDim, lc.KVHeads
	pk, pv := out["present_key"+sfx].Floats(), out["present_value"+sfx].Floats()
	round := func(x float32) float32 { return FloatTensor(dt, []int64{1}, []float32{x}).Floats()[0] }
	bad := 0
	for g := range KV {
		for d := range D {
			for s := range C - 1 {
				if pk[(g*D+d)*C+s] != round(lc.Key[(g*D+d)*C+s+1]) {
					bad++
				}
				if pv[(g*C+s)*D+d] != round(lc.Value[(g*C+s+1)*D+d]) {
					bad++
				}
			}
		}
	}
	return bad
}

func countTrue(b []bool) int {
	n := 0
	for _, x := range b {
		if x {
			n++
		}
	}
	return n
}

// finish turns the accumulators into graph reports and applies the bars.
func (v *verifier) finish() {
	r := v.report
	r.Pass = true
	fail := func(format string, a ...any) {
		r.Pass = false
		r.Failures = append(r.Failures, fmt.Sprintf(format, a...))
	}
	for _, g := range v.run.Manifest.Graphs {
		gr := GraphReport{File: g.File, Kind: g.Kind, Outputs: map[string]Metric{}, SNR: DB(math.Inf(1)), Pass: true}
		names := make([]string, 0, len(v.accs[g.File]))
		for n := range v.accs[g.File] {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			mt := v.accs[g.File][n].metric()
			gr.Outputs[n] = mt
			gr.SNR = min(gr.SNR, mt.SNR)
			gr.MaxAbs = math.Max(gr.MaxAbs, mt.MaxAbs)
			if float64(mt.SNR) < r.BarDB || math.IsNaN(float64(mt.SNR)) {
				gr.Pass = false
				fail("%s %s: SNR %.1f dB < %.0f dB", g.File, n, float64(mt.SNR), r.BarDB)
			}
		}
		r.Graphs = append(r.Graphs, gr)
	}
	if r.Top1Agree != r.Steps {
		fail("head top-1 agrees at %d of %d steps", r.Top1Agree, r.Steps)
	}
	if r.Top5Agree != r.Steps {
		fail("head top-5 set agrees at %d of %d steps", r.Top5Agree, r.Steps)
	}
	if r.ShiftErrors != 0 {
		fail("roll graphs: %d present_* entries are not the input shifted by one", r.ShiftErrors)
	}
}

// topK returns the indices of the k largest values, largest first (lower
// index first on ties).
func topK(v []float32, k int) []int {
	idx := make([]int, 0, k+1)
	for i, x := range v {
		pos := len(idx)
		for pos > 0 && x > v[idx[pos-1]] {
			pos--
		}
		if pos >= k {
			continue
		}
		idx = append(idx, 0)
		copy(idx[pos+1:], idx[pos:])
		idx[pos] = i
		if len(idx) > k {
			idx = idx[:k]
		}
	}
	return idx
}

func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[int]bool{}
	for _, x := range a {
		in[x] = true
	}
	for _, x := range b {
		if !in[x] {
			return false
		}
	}
	return true
}
