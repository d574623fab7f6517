package gptq

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime/debug"
	"time"

	"sparkconv/calib"
	"sparkconv/convert"
	"sparkconv/forward"
	"sparkconv/kernels"
	"sparkconv/progress"
	"sparkconv/quant"
	"sparkconv/spark"
	"sparkconv/tokenizer"
)

// Calibrator is the calibrated GPTQ of a conversion: a convert.Solver for
// the gptq, w4a16 and w8a8 writers.
type Calibrator struct {
	Files    []string // samples files (calibrate's formats); none: the embedded corpus
	Budget   int      // calibration tokens (DefaultBudget when 0)
	SeqLen   int      // longest chunk in tokens (DefaultSeqLen when 0)
	Damp     float64  // damping fraction of the mean diagonal (DefaultDamp when 0)
	ActOrder bool     // static act-order
	Smooth   float64  // SmoothQuant alpha in (0, 1) before the int8 solve; 0: none
	// Weighted searches each 4-bit group's parameters under the input
	// channels' importances (the Hessian's diagonal, llama.cpp's imatrix)
	// instead of the plain squared weight error.
	Weighted bool
	// Refit is how many sweeps of the least-squares refit of the group
	// parameters to the solved codes under the Hessian (refine) follow
	// each solve; 0: none.
	Refit int
	// Rounds is how many times the codes are solved when Refit is on
	// (1 when 0): after the first, each solve takes the refitted
	// parameters as given, and the result with the lower loss is kept.
	Rounds int
	// FloatTarget is the weight of the float model in each linear's target
	// (asymmetric calibration, GPTAQ's objective), in [0, 1]: the float
	// model runs beside the quantized one over the calibration chunks, and
	// each linear is solved toward W* = W + FloatTarget * W C H^-1, the
	// weights that best map the quantized model's input X onto the float
	// model's output W X_f (C = sum (X_f - X)^T X, H = X^T X; at 1 the
	// least-squares target, at 0 GPTQ's own W). 0: off.
	FloatTarget float64
	// QuietShortText: no warning when the text gives fewer tokens than
	// Budget (the budget is a default, not the user's ask).
	QuietShortText bool
	Log            io.Writer // warnings and fallbacks; nil: none
	Quiet          bool      // no progress bar
	// OnLayer, if set, is called after each layer with its modules'
	// records and the forward and solve time it took (for measurements
	// and logs of long runs).
	OnLayer func(layer int, mods []*convert.ModuleReport, forward, solve time.Duration)

	layerLimit int  // tests: calibrate only the first layerLimit layers
	layerFrom  int  // tests: run the layers before it in float, unsolved
	retryAll   bool // tests: try every retry damping on every module, not only until one wins
	// tests: called before each stage's pass over the chunks with the
	// input it produces (-1: the layer's output) and the layer's weights
	// as the pass reads them.
	beforePass func(layer int, input forward.Point, l *forward.Layer)
	trace      func(at string) // tests: called at the head's stages (memory probes)
}

func (c *Calibrator) defaults() {
	if c.Budget <= 0 {
		c.Budget = DefaultBudget
	}
	if c.SeqLen <= 0 {
		c.SeqLen = DefaultSeqLen
	}
	if c.Damp <= 0 {
		c.Damp = DefaultDamp
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
}

// solveOptions are the calibrator's solve variants.
func (r *run) solveOptions() solveOptions { return solveOptions{weighted: r.cal.WeightedSearch} }

// solveRefined solves m on factor f and, with Refit, refits its group
// parameters under h's Hessian; with Rounds > 1 it then solves the codes
// again for the refitted parameters and refits those, keeping whichever
// result has the lower loss on the calibration rows.
func (r *run) solveRefined(m quant.Matrix, f *Factor, h *calib.Hessian, done func()) (*Result, error) {
	res := &Result{}
	if err := solve(res, m, f, r.grid, done, r.solveOptions()); err != nil {
		return nil, err
	}
	if r.c.Refit <= 0 {
		return res, nil
	}
	loss := r.refineResult(res, m, h)
	for range r.c.Rounds - 1 {
		again := &Result{}
		if err := solve(again, m, f, r.grid, done, solveOptions{given: res}); err != nil {
			return nil, err
		}
		l := r.refineResult(again, m, h)
		if !(l < loss) {
			break
		}
		res, loss = again, l
	}
	return res, nil
}

// refineResult runs the parameter refit on res with h's Hessian in
// float32 (made once per input, kept in r.hf) and returns its loss.
func (r *run) refineResult(res *Result, m quant.Matrix, h *calib.Hessian) float64 {
	if r.hfOf != h {
		r.hf = make([]float32, len(h.H))
		kernels.Parallel(h.K, func(lo, hi int) {
			for i := lo * h.K; i < hi*h.K; i++ {
				r.hf[i] = float32(h.H[i])
			}
		})
		r.hfOf = h
	}
	setPhase("refine")
	return refine(res, m, r.hf, r.grid, r.c.Refit, true)
}

// layerModule is one quantized linear of a layer and the input it reads.
type layerModule struct {
	name  string // spark module name
	input forward.Point
}

// layerModules lists the quantized linears in the order they are solved,
// each with its input (forward.LinearInputs: q_k_v_proj's Hessian also
// belongs to g_proj, which stays float; gate_proj and up_proj share one).
var layerModules = func() []layerModule {
	var out []layerModule
	for _, in := range forward.LinearInputs {
		for _, r := range in.QuantReaders() {
			out = append(out, layerModule{r, in.Point})
		}
	}
	return out
}()

// gcPercent is the garbage collector's target during a calibration.
const gcPercent = 20

// run is one calibration in progress.
type run struct {
	c       *Calibrator
	j       *convert.Job
	spec    convert.SolveSpec
	grid    Grid
	loop    *calib.Loop // the quantized model's forward and residual streams (quantized layers so far)
	hand    [][]float32 // what one stage hands the next, per chunk: att [T, QD], then act [T, I]
	norm    []float32   // a norm's output for the chunk being run [SeqLen, H]
	float   *stream     // the float model beside the quantized one (FloatTarget), or nil
	targets map[string]convert.Target
	hess    map[forward.Point]*calib.Hessian
	f       Factor
	st      *store
	cal     *convert.Calibration
	bar     *progress.Bar
	fwd     time.Duration
	solve   time.Duration
	hf      []float32      // the Hessian hfOf in float32 (refine)
	hfOf    *calib.Hessian // whose Hessian hf holds
}

// Solve calibrates and solves every target of spec, layer by layer.
func (c *Calibrator) Solve(j *convert.Job, spec convert.SolveSpec) (convert.Solution, error) {
	c.defaults()
	if err := c.checkFloatTarget(); err != nil {
		return nil, err
	}
	// Most of the heap is long-lived (Hessians, the factor, the layer, the
	// activations); what churns are solve panels and per-module buffers.
	// The default GOGC=100 lets that garbage grow to the size of the live
	// set before a collection: measured on the full model, 20 keeps the
	// peak 0.2 GB lower at no measurable cost.
	defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	r := &run{c: c, j: j, spec: spec, targets: map[string]convert.Target{},
		grid: Grid(spec.GridSpec)}
	for _, t := range spec.Targets {
		r.targets[t.Source] = t
	}
	if err := r.prepare(); err != nil {
		return nil, err
	}
	f, err := j.Scratch(".sparkconv-gptq-codes")
	if err != nil {
		return nil, err
	}
	r.st = newStore(f)
	r.st.cal = r.cal
	if err := r.layers(); err != nil {
		return nil, err
	}
	h := r.hess[forward.AttnNorm]
	r.cal.HessianTokens, r.cal.HeldOutTokens = h.Tokens, int64(h.HeldRows())
	if err := r.head(); err != nil {
		return nil, err
	}
	r.loop, r.f = nil, Factor{}
	debug.FreeOSMemory() // the writer starts from the store alone
	r.bar.Done(true)
	r.cal.ForwardS, r.cal.SolveS, r.cal.PeakRSSMB = r.fwd.Seconds(), r.solve.Seconds(), convert.PeakRSSMB()
	fmt.Fprintf(c.Log, "sparkconv: gptq: calibrated on %d tokens of %d samples (%s): forward %.1fs, solve %.1fs, %d fallbacks\n",
		r.cal.Tokens, r.cal.Samples, r.cal.Sources[0], r.cal.ForwardS, r.cal.SolveS, len(r.cal.Fallbacks))
	return r.st, nil
}

// sequentialText is the report's and the config's account of the order.
const sequentialText = "true sequential: layer by layer, and inside a layer stage by stage over all chunks: " +
	"q_k_v_proj on the input norm of the quantized layers' output, o_proj on the attention with the quantized q_k_v_proj " +
	"(g_proj stays float), gate_proj and up_proj on the post-attention norm after the quantized o_proj, " +
	"down_proj on the GEGLU of the quantized gate_proj and up_proj"

// prepare reads and tokenizes the calibration text and embeds it.
func (r *run) prepare() error {
	c, cfg := r.c, r.j.Model.Config
	tokJSON, ok := r.j.AuxFile("tokenizer.json")
	if !ok {
		return fmt.Errorf("calibration needs the model's tokenizer.json, which %s lacks (or --rtn for round to nearest)", r.j.Opt.Model)
	}
	tok, err := tokenizer.Parse(tokJSON)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(r.j.Opt.Model, "tokenizer.json"), err)
	}
	src := calib.Source{Files: c.Files, Default: calib.CalibText, Tok: tok, Vocab: cfg.VocabSize, MinTokens: calib.MinTokens, Log: c.Log,
		Also: func(tokens int) (string, error) {
			if tokens < c.Budget && !c.QuietShortText {
				return fmt.Sprintf("the calibration text gives %d tokens, fewer than the budget of %d (--tokens): all of them are used; add samples for more", tokens, c.Budget), nil
			}
			return "", nil
		}}
	text, err := src.Take(&calib.Share{Budget: c.Budget, SeqLen: c.SeqLen})
	if err != nil {
		return err
	}
	chunks, rd, tokens := text.Chunks, text.Read, int64(text.Tokens)
	samples := map[int]bool{}
	for _, ch := range chunks {
		samples[ch.Sample] = true
	}
	r.cal = &convert.Calibration{Method: "gptq", Sources: rd.Sources, SHA256: rd.SHA256, Samples: len(samples), Tokens: tokens,
		TokenBudget: c.Budget, SeqLen: c.SeqLen, DampPercent: c.Damp, BlockSize: BlockSize, ActOrder: c.ActOrder,
		StaticGroups: c.ActOrder, TrueSequential: true, Sequential: sequentialText, Kernels: kernels.Family(), Fallbacks: []convert.Fallback{}, Redamped: []convert.Redamp{},
		WeightedSearch: c.Weighted && r.spec.Search && r.spec.Kind != convert.GridInt8, RefitSweeps: c.Refit}
	if c.Refit > 0 {
		r.cal.RefitRounds = c.Rounds
	}
	fm, err := forward.New(r.j.Model, forward.Options{CachedLayers: 1, FamilyLinears: true})
	if err != nil {
		return err
	}
	if r.loop, err = calib.NewLoop(fm, chunks); err != nil {
		return err
	}
	r.loop.Ctx = r.j.Context()
	r.hand = make([][]float32, len(chunks))
	longest := 0
	for k, ch := range chunks {
		r.hand[k] = make([]float32, len(ch.IDs)*max(cfg.QDim(), cfg.IntermediateSize))
		longest = max(longest, len(ch.IDs))
	}
	r.norm = make([]float32, longest*cfg.HiddenSize)
	if c.FloatTarget > 0 {
		if err := r.newStream(); err != nil {
			return err
		}
		r.cal.FloatTarget = c.FloatTarget
	}
	H, I, QD := cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim()
	r.hess = map[forward.Point]*calib.Hessian{forward.AttnNorm: newHessian(H), forward.AttnGated: newHessian(QD),
		forward.MLPNorm: newHessian(H), forward.MLPAct: newHessian(I)}
	if c.Smooth > 0 {
		if r.spec.Kind != convert.GridInt8 {
			return fmt.Errorf("SmoothQuant (--smooth) is for W8A8 only: it moves activation outliers into the weights, which 4-bit weights cannot absorb")
		}
		r.hess[forward.AttnNorm].TrackMax, r.hess[forward.MLPNorm].TrackMax = true, true
		r.cal.SmoothAlpha = c.Smooth
	}
	steps := int64(5 * cfg.NumLayers * len(chunks))
	if r.headTarget() != nil {
		steps += int64(len(chunks))
	}
	if !c.Quiet {
		r.bar = progress.New(steps, "gptq", false)
	}
	r.loop.Bar = r.bar
	return nil
}

// layers calibrates, solves and propagates every layer in turn,
// true-sequentially: each stage of the layer runs over every chunk, the
// Hessian of the input it produces is accumulated, the linears reading
// that input are solved and their weights replaced by the dequantized
// codes, and only then does the next stage run, on the quantized output:
//
//	input norm -> H(attn_norm) -> q_k_v_proj (g_proj stays float)
//	attention with the quantized q_k_v_proj -> H(attn_gated) -> o_proj
//	o_proj + residual, post norm -> H(mlp_norm) -> gate_proj, up_proj
//	GEGLU with the quantized gate/up -> H(mlp_act) -> down_proj
//	down_proj + residual: the next layer's input
//
// One pass of the forward per layer. The norms are computed again in the
// stage that reads them (SmoothQuant may have rescaled their weights
// meanwhile); the gated attention and the GEGLU product are kept per chunk
// (r.hand).
func (r *run) layers() error {
	cfg := r.j.Model.Config
	n := cfg.NumLayers
	if r.c.layerLimit > 0 {
		n = min(n, r.c.layerLimit)
	}
	for i := range n {
		if i < r.c.layerFrom {
			if err := r.floatLayer(i); err != nil {
				return err
			}
			continue
		}
		r.bar.Describe(fmt.Sprintf("gptq layer %d/%d", i+1, cfg.NumLayers))
		for _, h := range r.hess {
			h.Reset()
		}
		fwd0, solve0 := r.fwd, r.solve
		l, err := r.loop.Model.Layer(i) // float32 weights, replaced by codes as they are solved
		if err != nil {
			return err
		}
		s, err := r.loop.Model.Stages(i, nil)
		if err != nil {
			return err
		}
		stages := stagesOf(s, r.loop.Streams, r.hand, r.norm)
		var floats []stage // the float model's same stages (FloatTarget)
		if r.float != nil {
			sf, err := r.float.loop.Model.Stages(i, nil)
			if err != nil {
				return err
			}
			floats = floatStages(sf, r.float.loop.Streams, r.float.hand, r.float.norm)
		}
		for si, st := range stages {
			input := st.input
			var h *calib.Hessian
			if input >= 0 {
				h = r.hess[input]
			}
			if r.c.beforePass != nil {
				r.c.beforePass(i, input, l)
			}
			var fl func(k, T int) []float32
			if floats != nil {
				fl = floats[si].run
			}
			if err := r.pass(i, input, st.run, fl, h); err != nil {
				return err
			}
			// The packed weights serve one pass: the solve that follows
			// rewrites weights, and its factor is the peak of memory.
			l.DropPacked()
			if r.float != nil && input == forward.MLPAct {
				// The float stream is through the layer (floatStages): its
				// float32 weights need not sit beside down_proj's solve.
				r.float.loop.Model.DropLayers()
			}
			if h != nil {
				r.mark("pass " + input.String())
				if err := r.solveInput(i, l, input); err != nil {
					return err
				}
				r.mark("solved " + input.String())
			}
		}
		var mods []*convert.ModuleReport
		var names []string
		for _, lm := range layerModules {
			if e, ok := r.st.entries[spark.LayerWeight(i, lm.name)]; ok {
				mods, names = append(mods, e.report), append(names, lm.name)
			}
		}
		if r.c.OnLayer != nil {
			r.c.OnLayer(i, mods, r.fwd-fwd0, r.solve-solve0)
		}
		if !r.c.Quiet && !progress.Visible() {
			r.logLayer(i, names, mods, r.fwd-fwd0, r.solve-solve0)
		}
		debug.FreeOSMemory()
	}
	return nil
}

// stage is one of a layer's stages over one chunk k of T tokens: run
// returns the input it produces for a solve (nil for the last stage),
// input names it (-1: the last stage, nothing to solve).
type stage struct {
	run   func(k, T int) []float32
	input forward.Point
}

// stagesOf is a layer's stages on the residual streams xs, the per-chunk
// hand-over buffers hand and the norm buffer, in order.
func stagesOf(s *forward.Stages, xs, hand [][]float32, norm []float32) []stage {
	return []stage{
		{func(k, T int) []float32 { s.InputNorm(norm, xs[k], T); return norm }, forward.AttnNorm},
		{func(k, T int) []float32 {
			s.InputNorm(norm, xs[k], T)
			s.Attention(hand[k], norm, T)
			return hand[k]
		}, forward.AttnGated},
		{func(k, T int) []float32 {
			s.AttnOut(xs[k], hand[k], T)
			s.PostNorm(norm, xs[k], T)
			return norm
		}, forward.MLPNorm},
		{func(k, T int) []float32 {
			s.PostNorm(norm, xs[k], T)
			s.MLPAct(hand[k], norm, T)
			return hand[k]
		}, forward.MLPAct},
		{func(k, T int) []float32 { s.MLPOut(xs[k], hand[k], T); return nil }, -1},
	}
}

// floatLayer runs layer i with its float weights over every chunk (the
// measurements' shortcut to a deep layer), on the float stream too.
func (r *run) floatLayer(i int) error {
	if err := r.loop.Layer(i, nil, nil); err != nil {
		return err
	}
	if r.float != nil {
		for k, x := range r.loop.Streams {
			copy(r.float.loop.Streams[k], x)
		}
	}
	return nil
}

// pass runs one stage over every chunk, adding what it returns to h (if
// any), with what fl returns (the float stream's same stage, if set) as
// its reference; its time is forward time.
func (r *run) pass(i int, p forward.Point, run, fl func(k, T int) []float32, h *calib.Hessian) error {
	t0 := time.Now()
	defer func() { r.fwd += time.Since(t0) }()
	H := r.j.Model.Config.HiddenSize
	return r.loop.Pass(func(k, T int) error {
		setPhase("forward")
		var ref []float32
		if fl != nil {
			ref = fl(k, T)
		}
		x := run(k, T)
		// An overflow (extreme weights) is refused where it appears, as
		// the forward refuses it, before a Hessian or a report holds NaN.
		if h == nil {
			return forward.CheckFinite(i, forward.HiddenOut, r.loop.Streams[k][:T*H], H)
		}
		if err := forward.CheckFinite(i, p, x[:T*h.K], h.K); err != nil {
			return err
		}
		setPhase("hessian")
		if ref != nil {
			h.AddRef(x, ref, T)
		} else {
			h.Add(x, T)
		}
		return nil
	})
}

// logLayer prints one line per layer when no progress bar is drawn (a
// log or CI run): the layer's forward and solve time and each module's
// held-out error, GPTQ against round to nearest.
func (r *run) logLayer(i int, names []string, mods []*convert.ModuleReport, fwd, solve time.Duration) {
	line := fmt.Sprintf("sparkconv: gptq: layer %d/%d: forward %.1fs, solve %.1fs; held-out error gptq/rtn", i+1, r.j.Model.Config.NumLayers, fwd.Seconds(), solve.Seconds())
	for k, m := range mods {
		line += fmt.Sprintf(" %s %.4g/%.4g", names[k], m.OutErr, m.OutErrRTN)
		if m.Method != "gptq" || m.Note != "" {
			line += "*"
		}
	}
	fmt.Fprintln(r.c.Log, line)
}

// solveInput solves the targets of layer l that read input p: its
// Hessian is finished (and smoothed, for SmoothQuant) and factored once,
// each target solved, and its float32 weights replaced by the dequantized
// codes for the stages that follow.
func (r *run) solveInput(i int, l *forward.Layer, p forward.Point) error {
	h := r.hess[p]
	var mods []string // the modules reading p that have a target, in order
	for _, lm := range layerModules {
		if _, ok := r.targets[spark.LayerWeight(i, lm.name)]; ok && lm.input == p {
			mods = append(mods, lm.name)
		}
	}
	var ferr error
	for k, name := range mods {
		t := r.targets[spark.LayerWeight(i, name)]
		t0 := time.Now()
		if k == 0 { // one factor for all of them
			h.Finish()
			r.hfOf = nil // a new Hessian in the same accumulator
			if r.c.Smooth > 0 {
				if err := r.smoothInput(i, l, p, h); err != nil {
					return err
				}
			}
			setPhase("factor")
			ferr = Prepare(&r.f, h.H, h.K, r.c.Damp, r.c.ActOrder)
		}
		w := l.Linear(name)
		m := quant.F32Matrix(t.N, t.K, *w)
		orig := m
		if ferr == nil && r.float != nil {
			setPhase("target")
			m = floatTarget(*w, t.N, t.K, &r.f, h.Cross, r.c.FloatTarget)
			if k == len(mods)-1 {
				h.Cross = nil // the last target made: not held through the solve (AddRef makes it again)
			}
		}
		res, err := r.module(t, m, orig, h, ferr, p.String(), t0, nil, k == len(mods)-1)
		if errors.Is(err, errOverflow) {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if err != nil {
			return err
		}
		kernels.Parallel(t.N, func(lo, hi int) {
			for n := lo; n < hi; n++ {
				res.Dequantize(r.grid, n, (*w)[n*t.K:(n+1)*t.K])
			}
		})
	}
	return nil
}

// mark calls the test probe, if any.
func (r *run) mark(at string) {
	if r.c.trace != nil {
		r.c.trace(at)
	}
}

// headTarget is the quantized head, if any.
func (r *run) headTarget() *convert.Target {
	for _, t := range r.spec.Targets {
		if t.Module == "lm_head" {
			return &t
		}
	}
	return nil
}

// head solves the quantized head on the final norm's output. What the
// layers needed is released first (their Hessians, down_proj's factor, the
// forward's cached layer), and the head's mapped bf16 rows are dropped from
// the resident set after every panel of each pass over them: the head is
// 131072 x 2048, so its codes alone are 268 MB.
func (r *run) head() error {
	t := r.headTarget()
	r.hess, r.f, r.hand, r.norm, r.float = nil, Factor{}, nil, nil, nil
	r.loop.Model.DropLayers()
	if t == nil {
		r.loop.Streams = nil
		return nil
	}
	debug.FreeOSMemory()
	r.bar.Describe("gptq head")
	setPhase("head")
	r.mark("head start")
	h := newHessian(t.K)
	t0 := time.Now()
	err := r.loop.Pass(func(k, T int) error {
		h.Add(r.loop.Model.FinalNorm(r.loop.Streams[k]), T)
		r.loop.Streams[k] = nil
		return nil
	})
	if err != nil {
		return err
	}
	r.fwd += time.Since(t0)
	r.mark("head hessian")
	t0 = time.Now()
	h.Finish()
	setPhase("factor")
	ferr := Prepare(&r.f, h.H, h.K, r.c.Damp, r.c.ActOrder)
	r.mark("head factor")
	m, err := r.j.WeightMatrix(t.Source, t.N, t.K)
	if err != nil {
		return err
	}
	_, err = r.module(*t, m, m, h, ferr, forward.FinalNorm.String(), t0, func() { r.j.Model.Release(t.Source) }, true)
	r.j.Model.Release(t.Source)
	return err
}

// module solves one target (or rounds it to nearest when its Hessian did
// not factor, or when GPTQ's held-out error is above round to nearest's),
// measures both on the held-out rows and stores the result. Round to
// nearest's error is measured row block by row block: its whole Result is
// only made when it is the one stored. done (if set) is called whenever a
// pass over m's rows has read a part of them for the last time. last says
// no later module reads r.f, so a retry may factor into it. m is what the
// codes are solved toward (W, or the float target made from it), orig the
// weights W whose error the stored Stats give.
func (r *run) module(t convert.Target, m, orig quant.Matrix, h *calib.Hessian, ferr error, input string, t0 time.Time, done func(), last bool) (*Result, error) {
	rep := &convert.ModuleReport{Method: "gptq", Input: input, Tokens: h.Tokens, HeldOutRows: h.HeldRows()}
	var res *Result
	if ferr == nil {
		rep.DampPercent, rep.DampTries = r.f.Damp, r.f.Tries
		setPhase("solve")
		res = &Result{}
		var err error
		if res, err = r.solveRefined(m, &r.f, h, done); err != nil {
			return nil, fmt.Errorf("%s: %w", t.Source, err)
		}
		r.mark("solved")
		setPhase("heldout")
		errs := heldOutErr(h.Held, h.HeldRows(), m, r.grid, done, res, nearest{})
		rep.OutErr, rep.OutErrRTN = errs[0], errs[1]
		r.mark("heldout")
		if math.IsInf(rep.OutErr, 1) || math.IsInf(rep.OutErrRTN, 1) {
			return nil, fmt.Errorf("%s: %w", t.Module, errOverflow)
		}
	}
	if ferr == nil && (rep.OutErr > rep.OutErrRTN || r.c.retryAll) {
		var err error
		if res, err = r.retry(t, m, h, res, rep, done, last); err != nil {
			return nil, err
		}
	}
	if ferr != nil || rep.OutErr > rep.OutErrRTN {
		res = nil // GPTQ's codes are not kept: make room for round to nearest's
		rtn := &Result{}
		setPhase("rtn")
		if err := RoundToNearest(rtn, m, r.grid); err != nil {
			return nil, fmt.Errorf("%s: %w", t.Source, err)
		}
		if done != nil {
			done()
		}
		if ferr != nil {
			setPhase("heldout")
			rep.OutErrRTN = heldOutErr(h.Held, h.HeldRows(), m, r.grid, done, rtn)[0]
			if math.IsInf(rep.OutErrRTN, 1) {
				return nil, fmt.Errorf("%s: %w", t.Module, errOverflow)
			}
			r.fallback(t, rep, fmt.Sprintf("%v (damping tried up to the mean diagonal)", ferr))
		} else {
			r.fallback(t, rep, fmt.Sprintf("GPTQ's held-out output error %.4g is above round to nearest's %.4g", rep.OutErr, rep.OutErrRTN))
		}
		rep.OutErr, res = rep.OutErrRTN, rtn
	}
	if rep.Method == "gptq" && rep.DampPercent != r.c.Damp {
		r.cal.Redamped = append(r.cal.Redamped, convert.Redamp{Module: t.Module, DampPercent: rep.DampPercent})
	}
	if orig.F32 != nil && &orig.F32[0] != &m.F32[0] { // solved toward the float target
		res.restat(r.grid, orig)
	}
	rep.SolveS = time.Since(t0).Seconds()
	r.solve += time.Since(t0)
	if err := r.st.put(t.Source, res, rep); err != nil {
		return nil, err
	}
	r.mark("stored")
	return res, nil
}

// errOverflow is a module whose float output on the held-out rows is not
// finite: its weights are too large for the layer's forward, which the
// quantized codes (clamped to the grid's range) would hide.
var errOverflow = errors.New("its float output on the held-out rows is not finite: the forward overflowed float32 (extreme weights or activations); no result is given")

// RetryDamps are the dampings a module is solved again with, in turn,
// while its GPTQ codes at the requested damping lose to round to nearest
// on held-out rows (an overfitted Hessian, barely more rows than channels:
// more damping pulls the solve toward round to nearest), before it falls
// back to round to nearest. 1 is the whole mean diagonal. Measured on the
// full fixture's down_proj (K = 6656, 7373 Hessian rows at the default
// budget), which loses at 0.01 in almost every layer: the held-out error
// falls with damping up to 1 and rises again at 10 (0.01: 0.0566,
// 0.1: 0.0427, 1: 0.0338, 3.16: 0.0340, 10: 0.0360, round to nearest
// 0.0413), so 1 comes first; 0.1 is for a module that loses only a little.
// On the real model at 2048 tokens, 23 of 30 down_proj modules (K = 1536,
// 1844 Hessian rows) lose at 0.01 and every one wins at 1.
var RetryDamps = []float64{1, 0.1}

// retry solves m again at each of RetryDamps above the damping that lost,
// until one beats round to nearest; it keeps the best codes seen and says
// in rep.Note what each damping gave. When last, it factors into r.f
// itself (no other module reads it): a K = 6656 factor is 177 MB of
// float32 that a new one would allocate and clear again.
func (r *run) retry(t convert.Target, m quant.Matrix, h *calib.Hessian, res *Result, rep *convert.ModuleReport, done func(), last bool) (*Result, error) {
	setPhase("retry")
	tried := fmt.Sprintf("%g: %.4g", rep.DampPercent, rep.OutErr)
	f := &Factor{work: r.f.work} // r.f's float64 scratch is free again
	if last {
		f = &r.f
	}
	first, retried := rep.DampPercent, false
	for _, d := range RetryDamps {
		if d <= first || (rep.OutErr <= rep.OutErrRTN && !r.c.retryAll) {
			continue
		}
		// The refit's float32 Hessian is made again after the factor
		// (refineResult), not held beside Prepare's float64 scratch.
		r.hf, r.hfOf = nil, nil
		if err := Prepare(f, h.H, h.K, d, r.c.ActOrder); err != nil {
			continue
		}
		again, err := r.solveRefined(m, f, h, done)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Source, err)
		}
		e := heldOutErr(h.Held, h.HeldRows(), m, r.grid, done, again)[0]
		tried += fmt.Sprintf(", %g: %.4g", f.Damp, e)
		rep.DampTries += f.Tries
		if e < rep.OutErr {
			res, rep.OutErr, rep.DampPercent = again, e, f.Damp
		}
		retried = true
	}
	if retried {
		rep.Note = fmt.Sprintf("damping %g lost to round to nearest's %.4g on held-out rows; solved again (damping: held-out error) %s", first, rep.OutErrRTN, tried)
	}
	return res, nil
}

// fallback records a module rounded to nearest instead, on stderr and in
// the report.
func (r *run) fallback(t convert.Target, rep *convert.ModuleReport, why string) {
	rep.Method, rep.Fallback = "rtn", why
	r.cal.Fallbacks = append(r.cal.Fallbacks, convert.Fallback{Module: t.Module, Method: "rtn", Reason: why})
	fmt.Fprintf(r.c.Log, "sparkconv: warning: %s rounded to nearest instead of GPTQ: %s\n", t.Module, why)
}
