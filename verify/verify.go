package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/ortrun"
	"sparkconv/quant"
)

// Verification bars (per graph, every output).
const (
	BarFloat32 = 100.0 // dB
	BarFloat16 = 55.0  // dB
)

// Options tune Verify.
type Options struct {
	// Steps is the number of decode steps; 0 means sliding_window + 8, so
	// every sliding ring wraps (capped at context - 1).
	Steps int
	// Fingerprint is the --model checkpoint's onnxgraph.SourceFingerprint;
	// an export whose manifest records another is refused. "" skips it.
	Fingerprint string
	// Seed picks the token history and the cache garbage.
	Seed    uint64
	Threads int
	// Optimize is ONNX Runtime's graph optimization level (see
	// ortrun.SessionOptions). "" means "all" for float32 exports and "extended"
	// for float16 ones: at "all", ONNX Runtime 1.30's CPU provider fuses
	// the float16 RMSNorm pattern into SimplifiedLayerNormalization with
	// epsilon 1e-5 instead of the graph's constant (1e-6 for Spark), which
	// costs ~30 dB on small activations and is not the graph's error.
	Optimize string
	// KeyGarbage and ValueGarbage fill never-written slots; 0 means 50 and
	// 1000 (finite, far outside real activations, hidden only by the mask).
	KeyGarbage, ValueGarbage float64
	// Prompts are the prompt lengths the prefill check drives through an
	// export's prefill graphs before decoding (prefill.go); nil means
	// DefaultPrompts. Exports without prefill graphs ignore them.
	Prompts []int
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

// Report is the whole result.
type Report struct {
	Export      string        `json:"export"`
	Exports     []string      `json:"exports"`
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
	// Notes are checks that could not be made (not failures).
	Notes []string `json:"notes,omitempty"`
	// Prefill is the prefill check, for an export with prefill graphs.
	Prefill *PrefillReport `json:"prefill,omitempty"`
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
// Beside it runs the chained state: ORT on its own outputs the whole way.
//
// Verification is graph-major: one graph's session is open at a time and
// runs every step before the next graph opens, so memory holds one graph's
// weights (and the reference one layer's), not the whole export.
type verifier struct {
	ref    *forward.Model
	ctx    context.Context
	man    *onnxgraph.Manifest
	dirOf  map[string]string // graph file -> its export folder
	sopt   ortrun.SessionOptions
	dt     onnxgraph.DType
	ids    []int
	refH   [][]float32 // per step: the reference residual entering the next graph
	chainH [][]float32 // per step: ORT's own residual
	caches map[int]*forward.LayerCache
	chain  map[int]*onnxgraph.CacheState
	accs   map[string]map[string]*acc // file -> output -> errors
	chainL acc
	report *Report
	// prefillIO are prefill graphs' input/output mismatches; pending are
	// failed bars found before finish.
	prefillIO, pending []string
}

// Compare verifies the export in dirs (one folder, or the folders of a
// --layers matrix that together hold every graph exactly once) in ONNX
// Runtime against the float32 reference forward of the same checkpoint,
// step by step over a random token history, and checks the bars. Before
// anything runs it checks every file's sha256 against its manifest and the
// manifest's source fingerprint against o.Fingerprint (the --model
// checkpoint's); either mismatch is an error, not a failed bar. It stops
// between steps when ctx is done.
func Compare(ctx context.Context, ref *forward.Model, dirs []string, o Options) (*Report, error) {
	if o.KeyGarbage == 0 {
		o.KeyGarbage = 50
	}
	if o.ValueGarbage == 0 {
		o.ValueGarbage = 1000
	}
	man, dirOf, err := Union(dirs)
	if err != nil {
		return nil, err
	}
	if err := onnxgraph.CheckFiles(man, dirOf); err != nil {
		return nil, err
	}
	if err := checkSource(man, dirs, o.Fingerprint); err != nil {
		return nil, err
	}
	dt, err := onnxgraph.ParseDType(man.DType)
	if err != nil {
		return nil, err
	}
	if o.Optimize == "" {
		o.Optimize = "all"
		if dt == onnxgraph.Float16 {
			o.Optimize = "extended"
		}
	}
	if err := checkAgainstConfig(man, ref); err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(dirs, ", "), err)
	}
	c := ref.Cfg
	steps := o.Steps
	if steps <= 0 {
		steps = c.SlidingWindow + 8
	}
	steps = min(steps, man.Context-1)
	v := &verifier{ctx: ctx, ref: ref, man: man, dirOf: dirOf, dt: dt, caches: map[int]*forward.LayerCache{}, chain: map[int]*onnxgraph.CacheState{}, accs: map[string]map[string]*acc{},
		sopt: ortrun.SessionOptions{Threads: o.Threads, Optimize: o.Optimize}}
	v.report = &Report{Export: strings.Join(dirs, ", "), Exports: dirs, ORTOptimize: o.Optimize, DType: man.DType, ORTVersion: ortrun.Version(), Steps: steps, BarDB: BarFloat32}
	if man.Source == nil {
		v.report.Notes = append(v.report.Notes, "the manifest records no source fingerprint (an export by an older sparkconv): which checkpoint it came from was not checked")
	}
	if dt == onnxgraph.Float16 {
		v.report.BarDB = BarFloat16
	}
	if err := v.initCaches(ortrun.RunnerOptions{KeyGarbage: o.KeyGarbage, ValueGarbage: o.ValueGarbage, Seed: o.Seed}); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x70c3))
	v.ids = make([]int, steps)
	for p := range v.ids {
		v.ids[p] = rng.IntN(c.VocabSize)
	}
	var fileErrs []string
	for _, g := range onnxgraph.GraphOrder(man) {
		bad, err := v.runGraph(g)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", g.File, err)
		}
		fileErrs = append(fileErrs, bad...)
	}
	v.report.Chain = v.chainL.metric()
	if man.Prefill != nil {
		prompts := o.Prompts
		if prompts == nil {
			prompts = DefaultPrompts(man.Prefill.Tokens, man.Context)
		}
		if err := v.runPrefill(prompts, o.Seed); err != nil {
			return nil, err
		}
		fileErrs = append(fileErrs, v.prefillIO...)
	}
	v.finish()
	for _, e := range fileErrs {
		v.report.Pass = false
		v.report.Failures = append(v.report.Failures, e)
	}
	return v.report, nil
}

// checkSource compares the manifest's source fingerprint with the model's.
func checkSource(man *onnxgraph.Manifest, dirs []string, fp string) error {
	if man.Source == nil || fp == "" {
		return nil
	}
	if man.Source.Method != onnxgraph.FingerprintMethod {
		return fmt.Errorf("%s: the source fingerprint was computed as %q, which this sparkconv cannot recompute", strings.Join(dirs, ", "), man.Source.Method)
	}
	if man.Source.Fingerprint != fp {
		return fmt.Errorf("this export was made from another checkpoint: %s records source %s, the --model checkpoint is %s (give the checkpoint it was exported from, or export this one)",
			strings.Join(dirs, ", "), short(man.Source.Fingerprint), short(fp))
	}
	return nil
}

func short(fp string) string {
	if len(fp) > 23 {
		return fp[:23] + "..."
	}
	return fp
}

// Union reads the manifests of dirs and joins them into one export: the
// folders of an --layers matrix must agree on everything but their graphs
// and together hold the embed graph, every layer and the head exactly once.
// It returns the joined manifest and each graph file's folder.
func Union(dirs []string) (*onnxgraph.Manifest, map[string]string, error) {
	if len(dirs) == 0 {
		return nil, nil, fmt.Errorf("no export folder")
	}
	var out *onnxgraph.Manifest
	dirOf := map[string]string{}
	owner := map[string]string{} // "embed", "head", "layer N" -> folder
	for _, dir := range dirs {
		m, err := onnxgraph.ReadManifest(dir)
		if err != nil {
			return nil, nil, err
		}
		if out == nil {
			c := *m
			c.Graphs = nil
			if m.Prefill != nil {
				c.Prefill = &onnxgraph.Prefill{Tokens: m.Prefill.Tokens}
			}
			out = &c
		} else if d := manifestDiff(out, m); d != "" {
			return nil, nil, fmt.Errorf("%s and %s are not parts of one export: %s", dirs[0], dir, d)
		}
		for _, g := range m.Graphs {
			keys := []string{g.Kind}
			if infos := g.LayerInfos(); len(infos) > 0 {
				keys = nil
				for _, li := range infos {
					keys = append(keys, fmt.Sprintf("layer %d", li.Layer))
				}
			}
			for _, k := range keys {
				if prev, dup := owner[k]; dup {
					return nil, nil, fmt.Errorf("%s is in both %s and %s: the --export folders overlap", k, prev, dir)
				}
				owner[k] = dir
			}
			if _, dup := dirOf[g.File]; dup {
				return nil, nil, fmt.Errorf("%s is in two --export folders", g.File)
			}
			dirOf[g.File] = dir
			out.Graphs = append(out.Graphs, g)
		}
		if m.Prefill != nil {
			for _, g := range m.Prefill.Graphs {
				if _, dup := dirOf[g.File]; dup {
					return nil, nil, fmt.Errorf("%s is in two --export folders", g.File)
				}
				dirOf[g.File] = dir
				out.Prefill.Graphs = append(out.Prefill.Graphs, g)
			}
		}
	}
	var missing []string
	for _, k := range []string{onnxgraph.KindEmbed, onnxgraph.KindHead} {
		if owner[k] == "" {
			missing = append(missing, k)
		}
	}
	layers := 0
	if v, ok := out.Config["num_hidden_layers"]; ok {
		fmt.Sscan(string(v), &layers)
	}
	var gap []int
	for i := range layers {
		if owner[fmt.Sprintf("layer %d", i)] == "" {
			gap = append(gap, i)
		}
	}
	if len(gap) > 0 {
		missing = append(missing, "layers "+ranges(gap))
	}
	if len(missing) > 0 {
		what := "the export lacks"
		if len(dirs) > 1 || out.Partial {
			what = "the --export folders together lack"
		}
		return nil, nil, fmt.Errorf("%s %s (a --layers export verifies as a set: pass every folder of the matrix with one --export each)", what, strings.Join(missing, ", "))
	}
	out.Partial = false
	return out, dirOf, nil
}

// manifestDiff names the first key two parts of one export disagree on.
func manifestDiff(a, b *onnxgraph.Manifest) string {
	fpA, fpB := "", ""
	if a.Source != nil {
		fpA = a.Source.Fingerprint
	}
	if b.Source != nil {
		fpB = b.Source.Fingerprint
	}
	cfgA, _ := json.Marshal(a.Config)
	cfgB, _ := json.Marshal(b.Config)
	preA, preB := 0, 0
	if a.Prefill != nil {
		preA = a.Prefill.Tokens
	}
	if b.Prefill != nil {
		preB = b.Prefill.Tokens
	}
	for _, d := range []struct {
		key  string
		x, y any
	}{
		{"opset", a.Opset, b.Opset}, {"context", a.Context, b.Context}, {"dtype", a.DType, b.DType},
		{"mask_value", a.MaskValue, b.MaskValue}, {"gelu", a.GELU, b.GELU}, {"granularity", a.Granularity, b.Granularity},
		{"layout", a.Layout, b.Layout}, {"source fingerprint", fpA, fpB}, {"config", string(cfgA), string(cfgB)},
		{"prefill tokens", preA, preB},
	} {
		if fmt.Sprint(d.x) != fmt.Sprint(d.y) {
			return fmt.Sprintf("%s %v vs %v", d.key, d.x, d.y)
		}
	}
	return ""
}

// ranges writes sorted ints as "0-3, 7".
func ranges(v []int) string {
	var parts []string
	for i := 0; i < len(v); {
		j := i
		for j+1 < len(v) && v[j+1] == v[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", v[i], v[j]))
		} else {
			parts = append(parts, fmt.Sprint(v[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// checkAgainstConfig compares every per-layer key with the model.
func checkAgainstConfig(man *onnxgraph.Manifest, ref *forward.Model) error {
	c := ref.Cfg
	seen := map[int]bool{}
	for _, g := range man.Graphs {
		for _, li := range g.LayerInfos() {
			if li.Layer >= c.NumLayers {
				return fmt.Errorf("%s: layer %d, but the model has %d layers (this export was made from another model)", g.File, li.Layer, c.NumLayers)
			}
			if seen[li.Layer] {
				return fmt.Errorf("%s: layer %d appears twice in the export", g.File, li.Layer)
			}
			seen[li.Layer] = true
			want := string(c.LayerTypes[li.Layer])
			if li.LayerType != want || li.RotaryDims != c.RotaryDims(li.Layer) || li.RopeTheta != c.RoPEFor(li.Layer).Theta || li.CacheSlots != c.CacheSlots(li.Layer, man.Context) {
				return fmt.Errorf("%s: layer %d is %s with %d rotary dims, rope theta %g and %d cache slots, but the model's layer %d is %s with %d, %g and %d (this export was made from another model)",
					g.File, li.Layer, li.LayerType, li.RotaryDims, li.RopeTheta, li.CacheSlots, li.Layer, want, c.RotaryDims(li.Layer), c.RoPEFor(li.Layer).Theta, c.CacheSlots(li.Layer, man.Context))
			}
		}
	}
	if len(seen) != c.NumLayers {
		return fmt.Errorf("export holds %d of the model's %d layers", len(seen), c.NumLayers)
	}
	return nil
}

// initCaches gives every layer the same garbage-filled starting cache as
// ortrun.OpenRunner does (same seed, same order), for the reference and the
// chained ORT run alike.
func (v *verifier) initCaches(opt ortrun.RunnerOptions) error {
	rng := rand.New(rand.NewPCG(opt.Seed, 0x5eed))
	for _, g := range v.man.Graphs {
		if g.Kind != onnxgraph.KindLayer && g.Kind != onnxgraph.KindBlock {
			continue
		}
		for _, li := range g.LayerInfos() {
			st, err := onnxgraph.NewCacheState(&g, li, rng, opt.KeyGarbage, opt.ValueGarbage)
			if err != nil {
				return err
			}
			lay := forward.Ring
			if li.Layout == onnxgraph.LayoutRoll {
				lay = forward.Roll
			}
			lc := forward.NewLayerCache(lay, st.KV, st.D, li.CacheSlots)
			copy(lc.Key, st.Key)
			copy(lc.Value, st.Value)
			v.caches[li.Layer], v.chain[li.Layer] = lc, st
		}
	}
	return nil
}

// runGraph opens one graph, checks its file against the manifest, runs
// every step through it, and closes it. It returns file mismatches.
func (v *verifier) runGraph(g onnxgraph.GraphEntry) ([]string, error) {
	var bad []string
	if err := v.ctx.Err(); err != nil {
		return nil, err
	}
	sess, err := ortrun.OpenSession(filepath.Join(v.dirOf[g.File], g.File), v.sopt)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	bad = append(bad, ortrun.CompareIO(g.File+" inputs", g.Inputs, sess.Inputs)...)
	bad = append(bad, ortrun.CompareIO(g.File+" outputs", g.Outputs, sess.Outputs)...)
	for p := range v.ids {
		if err := v.ctx.Err(); err != nil {
			return nil, err
		}
		switch g.Kind {
		case onnxgraph.KindEmbed:
			err = v.embedStep(sess, g, p)
		case onnxgraph.KindHead:
			err = v.headStep(sess, g, p)
		default:
			err = v.layerStep(sess, g, p)
		}
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", p, err)
		}
	}
	return bad, nil
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

func (v *verifier) hiddenTensor(h []float32) onnxgraph.Tensor {
	return onnxgraph.FloatTensor(v.dt, []int64{1, 1, int64(v.ref.Cfg.HiddenSize)}, h)
}

// embedStep starts step p: the reference embedding row against the graph.
func (v *verifier) embedStep(sess *ortrun.Session, g onnxgraph.GraphEntry, p int) error {
	if v.refH == nil {
		v.refH, v.chainH = make([][]float32, len(v.ids)), make([][]float32, len(v.ids))
	}
	h := make([]float32, v.ref.Cfg.HiddenSize)
	if err := v.ref.EmbedRow(h, v.ids[p]); err != nil {
		return err
	}
	out, err := sess.Run(map[string]onnxgraph.Tensor{"input_ids": onnxgraph.I64Tensor([]int64{1, 1}, []int64{int64(v.ids[p])})})
	if err != nil {
		return err
	}
	got := out["hidden_out"].Floats()
	v.acc(g.File, "hidden_out").add(h, got)
	v.refH[p], v.chainH[p] = h, got
	return nil
}

// headStep ends step p: reference logits against the graph on the
// reference's residual (gated) and on ORT's own chain (reported).
func (v *verifier) headStep(sess *ortrun.Session, g onnxgraph.GraphEntry, p int) error {
	m := v.ref
	logits, err := m.Logits(m.FinalNorm(v.refH[p]), 1)
	if err != nil {
		return err
	}
	out, err := sess.Run(map[string]onnxgraph.Tensor{"hidden_in": v.hiddenTensor(v.refH[p])})
	if err != nil {
		return err
	}
	got := out["logits"].Floats()
	v.acc(g.File, "logits").add(logits, got)
	if topK(logits, 1)[0] == topK(got, 1)[0] {
		v.report.Top1Agree++
	}
	if sameSet(topK(logits, 5), topK(got, 5)) {
		v.report.Top5Agree++
	}
	out, err = sess.Run(map[string]onnxgraph.Tensor{"hidden_in": v.hiddenTensor(v.chainH[p])})
	if err != nil {
		return err
	}
	v.chainL.add(logits, out["logits"].Floats())
	return nil
}

// layerStep runs one layer or block graph at step p on the reference's
// inputs, compares its outputs with the reference layers and advances the
// reference caches; then runs it on the chained state.
func (v *verifier) layerStep(sess *ortrun.Session, g onnxgraph.GraphEntry, p int) error {
	mv := float32(v.man.MaskValue)
	feeds := map[string]onnxgraph.Tensor{"hidden_in": v.hiddenTensor(v.refH[p])}
	type refOut struct{ k, v []float32 }
	refs := map[int]refOut{}
	x := v.refH[p]
	for _, li := range g.LayerInfos() {
		lc := v.caches[li.Layer]
		st := &onnxgraph.CacheState{Info: li, KV: lc.KVHeads, D: lc.HeadDim, Key: lc.Key, Value: lc.Value, Written: lc.Filled}
		if li.Layout == onnxgraph.LayoutRoll {
			st.Written = nil
			st.Filled = countTrue(lc.Filled)
		}
		for k, t := range st.Feeds(v.dt, p, mv, onnxgraph.LayerSuffix(g.Kind, li.Layer)) {
			feeds[k] = t
		}
		out, k, val, err := v.ref.DecodeLayer(li.Layer, x, p, lc)
		if err != nil {
			return err
		}
		refs[li.Layer] = refOut{k, val}
		x = out
	}
	got, err := sess.Run(feeds)
	if err != nil {
		return err
	}
	v.acc(g.File, "hidden_out").add(x, got["hidden_out"].Floats())
	for _, li := range g.LayerInfos() {
		sfx := onnxgraph.LayerSuffix(g.Kind, li.Layer)
		lc := v.caches[li.Layer]
		before := &onnxgraph.CacheState{Info: li, KV: lc.KVHeads, D: lc.HeadDim, Key: append([]float32(nil), lc.Key...), Value: append([]float32(nil), lc.Value...), Written: make([]bool, li.CacheSlots)}
		k, val, err := before.Update(got, p, sfx)
		if err != nil {
			return err
		}
		if li.Layout == onnxgraph.LayoutRoll {
			v.report.ShiftErrors += shiftErrors(lc, got, sfx, v.dt)
		}
		v.acc(g.File, "key"+sfx).add(refs[li.Layer].k, k)
		v.acc(g.File, "value"+sfx).add(refs[li.Layer].v, val)
		lc.Update(p, refs[li.Layer].k, refs[li.Layer].v)
	}
	v.refH[p] = x
	return v.chainStep(sess, g, p)
}

// chainStep runs the graph on ORT's own residual and caches.
func (v *verifier) chainStep(sess *ortrun.Session, g onnxgraph.GraphEntry, p int) error {
	mv := float32(v.man.MaskValue)
	feeds := map[string]onnxgraph.Tensor{"hidden_in": v.hiddenTensor(v.chainH[p])}
	for _, li := range g.LayerInfos() {
		for k, t := range v.chain[li.Layer].Feeds(v.dt, p, mv, onnxgraph.LayerSuffix(g.Kind, li.Layer)) {
			feeds[k] = t
		}
	}
	out, err := sess.Run(feeds)
	if err != nil {
		return err
	}
	for _, li := range g.LayerInfos() {
		if _, _, err := v.chain[li.Layer].Update(out, p, onnxgraph.LayerSuffix(g.Kind, li.Layer)); err != nil {
			return err
		}
	}
	v.chainH[p] = out["hidden_out"].Floats()
	return nil
}

// shiftErrors counts slots of a roll graph's present_* that are not the
// input cache shifted by one (a copy: it must be exact, at the graph's
// precision).
func shiftErrors(lc *forward.LayerCache, out map[string]onnxgraph.Tensor, sfx string, dt onnxgraph.DType) int {
	C, D, KV := lc.Slots, lc.HeadDim, lc.KVHeads
	pk, pv := out["present_key"+sfx].Floats(), out["present_value"+sfx].Floats()
	round := func(x float32) float32 { return onnxgraph.FloatTensor(dt, []int64{1}, []float32{x}).Floats()[0] }
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
	r.Pass = len(v.pending) == 0
	r.Failures = append(r.Failures, v.pending...)
	fail := func(format string, a ...any) {
		r.Pass = false
		r.Failures = append(r.Failures, fmt.Sprintf(format, a...))
	}
	for _, g := range v.man.AllGraphs() {
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

// fail records a failed bar found before finish.
func (v *verifier) fail(format string, a ...any) {
	v.pending = append(v.pending, fmt.Sprintf(format, a...))
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
