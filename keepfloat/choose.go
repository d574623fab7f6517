package keepfloat

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"sparkconv/calib"
	"sparkconv/convert"
	"sparkconv/forward"
	"sparkconv/infile"
	"sparkconv/kernels"
	"sparkconv/spark"
	"sparkconv/tokenizer"
)

// Defaults of the measurement.
const (
	// DefaultTokens of calibration text are measured (chunks of ChunkLen
	// tokens from samples spread over the text). The cost is one forward
	// of the layers from the unit's own on, per unit, over these tokens
	// (docs/keep-float.md has the time).
	DefaultTokens = 512
	// ChunkLen is the length of each measured chunk (each starts at
	// position 0, where the attention sink is).
	ChunkLen = 128
	// ScoreStride: every ScoreStride-th position's distribution is scored.
	ScoreStride = 4
)

// Options ask for a choice.
type Options struct {
	Count  int      // units to keep, 1 or more
	Files  []string // calibration samples files; none: the embedded corpus
	Tokens int      // calibration tokens measured
	// Format is the target build (convert.W8A8, convert.W4A8): its grid
	// and input rule are what each unit is measured with.
	Format convert.Format
	Log    io.Writer // progress lines; nil: none
}

// Measured is one unit's cost: the mean KL divergence (nats) of the model
// with only that unit quantized.
type Measured struct {
	Unit convert.KeepUnit
	KLD  float64
}

// Choose measures every unit of the checkpoint in dir and returns the
// o.Count costliest as the build's KeepFloat, with the measurement in its
// record, and every unit's cost (costliest first).
func Choose(ctx context.Context, dir string, o Options) (*convert.KeepFloat, []Measured, error) {
	t0 := time.Now()
	stamps, err := infile.StampFolder(dir)
	if err != nil {
		return nil, nil, err
	}
	sm, err := spark.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	defer sm.Close()
	units := convert.KeepUnits(sm.Config)
	if o.Count < 1 || o.Count > len(units) {
		return nil, nil, fmt.Errorf("--keep-float %d: the model has %d units (q_k_v_proj, o_proj, gate_proj+up_proj, down_proj per layer); want 1..%d", o.Count, len(units), len(units))
	}
	chunks, sources, sum, err := text(sm, dir, o)
	if err != nil {
		return nil, nil, err
	}
	qkv, ok := sm.Info(spark.LayerWeight(0, spark.QKV))
	if !ok {
		return nil, nil, fmt.Errorf("%s: no %s", dir, spark.LayerWeight(0, spark.QKV))
	}
	f := ruleOf(o.Format, qkv.DType)
	r, err := start(sm, f, chunks)
	if err != nil {
		return nil, nil, err
	}
	var all []Measured
	line := ""
	for _, u := range units {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		kld, err := r.cost(u)
		if err != nil {
			return nil, nil, fmt.Errorf("keep-float: measuring %s: %w", u, err)
		}
		all = append(all, Measured{u, kld})
		line += fmt.Sprintf(" %s %.3g", strings.Join(u.Modules, "+"), kld)
		if o.Log != nil && u.Modules[0] == spark.MLPDown {
			fmt.Fprintf(o.Log, "sparkconv: keep-float: layer %d/%d, KLD quantized alone:%s (%.0fs)\n", u.Layer+1, sm.Config.NumLayers, line, time.Since(t0).Seconds())
			line = ""
		}
	}
	slices.SortStableFunc(all, func(a, b Measured) int { return -cmpFloat(a.KLD, b.KLD) })
	keep := &convert.KeepFloat{Stamps: stamps}
	kept := []map[string]any{}
	for _, x := range all[:o.Count] {
		keep.Units = append(keep.Units, x.Unit)
		kept = append(kept, map[string]any{"unit": x.Unit.String(), "kld_alone": x.KLD})
	}
	tokens := 0
	for _, c := range chunks {
		tokens += len(c.IDs)
	}
	keep.Record = map[string]any{
		"count":     o.Count,
		"format":    f.Name,
		"criterion": "the units whose quantization alone (" + f.describe() + ") gives the largest mean KL divergence from the float model on the calibration tokens",
		"measured":  kept,
		"calibration": map[string]any{"sources": sources, "sha256": sum, "tokens": tokens, "chunk_len": ChunkLen,
			"scored_positions": r.scored, "score_stride": ScoreStride},
	}
	r = nil
	debug.FreeOSMemory() // the float32 layers go before the conversion starts
	return keep, all, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// text reads the calibration text: one chunk of ChunkLen tokens from the
// start of each of Tokens/ChunkLen samples spread evenly over the text.
// (calib.Spread: the samples are streamed twice, once to count them for
// the stride, then to encode only the chosen ones).
func text(sm *spark.Model, dir string, o Options) ([]calib.Chunk, []string, string, error) {
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, nil, "", fmt.Errorf("keep-float measures on calibration text and needs the model's tokenizer.json: %w", err)
	}
	src := calib.Source{Files: o.Files, Default: calib.CalibText, Tok: tok, Vocab: sm.Config.VocabSize, MinTokens: calib.MinTokens, Log: o.Log}
	t, err := src.Take(&calib.Spread{Tokens: o.Tokens, ChunkLen: ChunkLen})
	if err != nil {
		return nil, nil, "", err
	}
	return t.Chunks, t.Read.Sources, t.Read.SHA256, nil
}

// run is one measurement: the float model's layer inputs and reference
// log-probabilities at the scored positions.
type run struct {
	m      *forward.Model
	f      rule
	chunks []calib.Chunk
	xs     [][][]float32 // xs[i][k]: layer i's input on chunk k
	ref    []float32     // log-probabilities [scored, V]
	scored int
}

// start opens the forward on sm and runs the reference.
func start(sm *spark.Model, f rule, chunks []calib.Chunk) (*run, error) {
	m, err := forward.New(sm, forward.Options{})
	if err != nil {
		return nil, err
	}
	r := &run{m: m, f: f, chunks: chunks}
	return r, r.reference()
}

// reference runs the float forward, keeping every layer's input.
func (r *run) reference() error {
	c := r.m.Cfg
	r.xs = make([][][]float32, c.NumLayers)
	loop, err := calib.NewLoop(r.m, r.chunks)
	if err != nil {
		return err
	}
	for i := range c.NumLayers {
		r.xs[i] = make([][]float32, len(r.chunks))
		for k, x := range loop.Streams {
			r.xs[i][k] = slices.Clone(x)
		}
		if err := loop.Layer(i, nil, nil); err != nil {
			return err
		}
	}
	lp, err := r.logProbs(loop.Streams)
	if err != nil {
		return err
	}
	r.ref = lp
	r.scored = len(lp) / c.VocabSize
	return nil
}

// logProbs are the log-probabilities at the scored positions of the final
// residual streams x (one per chunk).
func (r *run) logProbs(x [][]float32) ([]float32, error) {
	c := r.m.Cfg
	H, V := c.HiddenSize, c.VocabSize
	var rows []float32
	for k, ch := range r.chunks {
		for p := ScoreStride - 1; p < len(ch.IDs); p += ScoreStride {
			rows = append(rows, x[k][p*H:(p+1)*H]...)
		}
	}
	T := len(rows) / H
	logits, err := r.m.Logits(r.m.FinalNorm(rows), T)
	if err != nil {
		return nil, err
	}
	kernels.Parallel(T, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			logSoftmax(logits[t*V : (t+1)*V])
		}
	})
	return logits, nil
}

// logSoftmax replaces v by its log-softmax.
func logSoftmax(v []float32) {
	mx := float32(math.Inf(-1))
	for _, x := range v {
		mx = max(mx, x)
	}
	var s float64
	for _, x := range v {
		s += math.Exp(float64(x - mx))
	}
	l := mx + float32(math.Log(s))
	for i := range v {
		v[i] -= l
	}
}

// cost is the mean KL divergence from the reference with unit u alone
// quantized.
func (r *run) cost(u convert.KeepUnit) (float64, error) {
	c := r.m.Cfg
	loop := &calib.Loop{Model: r.m, Chunks: r.chunks, Streams: make([][]float32, len(r.chunks))}
	for k := range r.chunks {
		loop.Streams[k] = slices.Clone(r.xs[u.Layer][k])
	}
	l, err := r.m.Layer(u.Layer)
	if err != nil {
		return 0, err
	}
	restore, err := r.quantize(l, u)
	if err != nil {
		return 0, err
	}
	err = loop.Layer(u.Layer, nil, nil)
	restore()
	if err != nil {
		return 0, err
	}
	for i := u.Layer + 1; i < c.NumLayers; i++ {
		if err := loop.Layer(i, nil, nil); err != nil {
			return 0, err
		}
	}
	lp, err := r.logProbs(loop.Streams)
	if err != nil {
		return 0, err
	}
	return meanKLD(r.ref, lp, c.VocabSize), nil
}

// meanKLD is the mean over rows of sum p_ref (log p_ref - log p).
func meanKLD(ref, lp []float32, V int) float64 {
	T := len(ref) / V
	per := make([]float64, T)
	kernels.Parallel(T, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			var s float64
			for v, a := range ref[t*V : (t+1)*V] {
				s += math.Exp(float64(a)) * float64(a-lp[t*V+v])
			}
			per[t] = max(s, 0)
		}
	})
	var s float64
	for _, v := range per {
		s += v
	}
	return s / float64(T)
}

// quantize replaces u's weights in l by the format's dequantized round to
// nearest and sets their activation rule; restore puts the float weights
// back.
func (r *run) quantize(l *forward.Layer, u convert.KeepUnit) (restore func(), err error) {
	c := r.m.Cfg
	type saved struct {
		w   *[]float32
		act *forward.Act
		old []float32
		was forward.Act
	}
	var undo []saved
	restore = func() {
		for _, s := range undo {
			copy(*s.w, s.old)
			*s.act = s.was
		}
	}
	for _, mod := range u.Modules {
		w, act, n, k := field(l, c, mod)
		if w == nil {
			return restore, fmt.Errorf("%s: not a linear of the forward", mod)
		}
		undo = append(undo, saved{w, act, slices.Clone(*w), *act})
		q, err := r.f.quantize(*w, n, k)
		if err != nil {
			restore()
			return restore, fmt.Errorf("%s: %w", spark.LayerModule(u.Layer, mod), err)
		}
		copy(*w, q)
		*act = r.f.Act
	}
	return restore, nil
}

// field is the layer's weight [n, k] of module and its activation rule.
func field(l *forward.Layer, c *spark.Config, mod string) (*[]float32, *forward.Act, int, int) {
	w, act := l.LinearAct(mod)
	if w == nil {
		return nil, nil, 0, 0
	}
	n := map[string]int{spark.QKV: c.QDim() + 2*c.KVDim(), spark.OProj: c.HiddenSize, spark.MLPGate: c.IntermediateSize,
		spark.MLPUp: c.IntermediateSize, spark.MLPDown: c.HiddenSize}[mod]
	if n == 0 {
		return nil, nil, 0, 0
	}
	return w, act, n, len(*w) / n
}
