package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"sparkconv/outdir"
)

// Settings of an evaluation: its windows and its greedy test.
type Settings struct {
	Ctx       int  // window length (512)
	Prompts   int  // greedy prompts (at most one per sample); 0 skips the test
	GenTokens int  // greedy tokens generated per prompt (32)
	Force     bool // recompute the base file even when it exists
	// BaseID identifies the base model (sha256 of its config and
	// weights): recorded in the base file, and a file made for another is
	// refused ("": not checked).
	BaseID string
	// Unchanged, when set, is called once the base file is computed and
	// before it is moved into place: an error (the base model's files
	// changed) keeps it from being written.
	Unchanged func() error
	// Progress, when set, is called with 1 after each window computed
	// (windows run in batches, so it moves a batch at a time).
	Progress func(n int)
	// Context, when set, stops the evaluation at the next window once it
	// is cancelled (SIGINT/SIGTERM), with its error.
	Context context.Context
}

// stopped is the context's error once it is cancelled.
func (o Settings) stopped() error {
	if o.Context == nil {
		return nil
	}
	return o.Context.Err()
}

// DefaultSettings are llama.cpp's window (512) and a greedy test of 8
// prompts continued for 32 tokens.
var DefaultSettings = Settings{Ctx: 512, Prompts: 8, GenTokens: 32}

// Check refuses option values out of range (usage errors).
func (o Settings) Check() error {
	var errs []error
	if o.Ctx < 4 {
		errs = append(errs, fmt.Errorf("--ctx %d: a window needs at least 4 tokens (the second half is scored)", o.Ctx))
	}
	if o.Prompts < 0 {
		errs = append(errs, fmt.Errorf("--greedy %d: want 0 (no greedy test) or more prompts", o.Prompts))
	}
	if o.GenTokens < 1 {
		errs = append(errs, fmt.Errorf("--gen-tokens %d: want at least 1", o.GenTokens))
	}
	return errors.Join(errs...)
}

// Greedy is the greedy reproduction test: how many of the prompts'
// continuations the build reproduces exactly, and the mean share of each
// continuation kept before the first different token.
type Greedy struct {
	Prompts    int     `json:"prompts"`
	Tokens     int     `json:"tokens"` // generated per prompt
	Exact      int     `json:"exact"`
	PrefixKept float64 `json:"prefix_kept"` // fraction
	// Diverged is, per prompt, the index of the first different token
	// (Tokens when reproduced).
	Diverged []int `json:"diverged"`
}

// Result is one build's evaluation.
type Result struct {
	Base   string `json:"base"`
	Model  string `json:"model"`
	Text   string `json:"text"`
	Ctx    int    `json:"ctx"`
	Window int    `json:"windows"` // how many
	Stats
	Greedy        Greedy    `json:"greedy"`
	KLDByPosition []float64 `json:"kld_by_position"` // mean KLD at positions ctx/2 .. ctx-2
	// ByWindow is each window's mean KLD and same top-1, WorstWindow the
	// window with the highest mean KLD: the worst sequence.
	ByWindow    []WindowStats `json:"by_window"`
	WorstWindow WindowStats   `json:"worst_window"`
	// BySample is each sample's figures (the text's samples, in file
	// order), WorstSample the one with the highest mean KLD among those
	// with at least MinSampleTokens scored tokens.
	BySample    []SampleStats `json:"by_sample,omitempty"`
	WorstSample *SampleStats  `json:"worst_sample,omitempty"`
	// LayerRelErr is, per layer, the relative RMS error of the build's
	// residual leaving it against the base's, sqrt(sum d^2 / sum ref^2),
	// over window 0's scored positions (when both are reference forwards;
	// the SNR in dB is -20 log10 of it).
	LayerRelErr []float64 `json:"layer_rel_err,omitempty"`
	Seconds     float64   `json:"seconds"`
	// TokensPerS is the build's throughput: the tokens of the windows and
	// of the greedy test's sequences run through the model, scored or not,
	// per second of Seconds.
	TokensPerS float64 `json:"tokens_per_s"`
	Tokens     []Token `json:"-"`
}

// Generate continues each prompt greedily by gen tokens: the model's own
// cached decode when it is a Generator, else generateUncached.
func Generate(m Model, prompts [][]int, gen int) ([][]int, error) {
	if g, ok := m.(Generator); ok {
		return g.Greedy(prompts, gen)
	}
	return generateUncached(m, prompts, gen)
}

// generateUncached runs the whole prefix again for every token (one Logits
// call per prompt and token): the plain definition the cached decode is
// tested against.
func generateUncached(m Model, prompts [][]int, gen int) ([][]int, error) {
	out := make([][]int, len(prompts))
	V := m.Vocab()
	for i, p := range prompts {
		seq := append([]int(nil), p...)
		for range gen {
			l, err := m.Logits(seq, len(seq)-1)
			if err != nil {
				return nil, err
			}
			id := argmax(l[:V])
			seq = append(seq, id)
			out[i] = append(out[i], id)
		}
	}
	return out, nil
}

// Evaluate scores m against the base file: every window, then the greedy
// test, all in batches (RunBatch). The greedy test is teacher-forced on
// the base's continuation: the build's greedy choice at step s is its
// argmax after the prompt and the base's first s tokens, which is its own
// continuation for as long as the two agree; so one sequence per prompt
// tells where the build's own continuation would first differ.
func Evaluate(b *BaseLogits, m Model, opt Settings) (*Result, error) {
	if m.Vocab() != b.Vocab {
		return nil, fmt.Errorf("%s has a vocabulary of %d, the base %d", m.Describe(), m.Vocab(), b.Vocab)
	}
	start := time.Now()
	first, count := Scored(b.Ctx)
	V := b.Vocab
	r := &Result{Base: b.Base, Model: m.Describe(), Text: b.Source, Ctx: b.Ctx, Window: b.Windows()}
	baseLayers, err := b.Layers()
	if err != nil {
		return nil, err
	}
	withLayers := false
	if lm, ok := m.(LayerModel); ok && baseLayers != nil {
		L, _ := lm.LayerShape()
		withLayers = L > 0
	}
	var reqs []Request
	tokens := 0
	for w := range b.Windows() {
		reqs = append(reqs, Request{IDs: b.IDs[w*b.Ctx : (w+1)*b.Ctx-1], First: first, Layers: w == 0 && withLayers})
	}
	for i, p := range b.Prompts {
		cont := b.Greedy[i]
		reqs = append(reqs, Request{IDs: append(append([]int(nil), p...), cont[:len(cont)-1]...), First: len(p) - 1})
	}
	for _, q := range reqs {
		tokens += len(q.IDs)
	}
	g := Greedy{Prompts: len(b.Prompts)}
	if g.Prompts > 0 {
		g.Tokens = len(b.Greedy[0])
	}
	lp := make([]float32, V)
	err = RunBatch(m, reqs, func(i int, out Output) error {
		if err := opt.stopped(); err != nil {
			return err
		}
		if i >= b.Windows() {
			g.check(b.Greedy[i-b.Windows()], out.Logits, V)
			return nil
		}
		w := i
		win := b.IDs[w*b.Ctx : (w+1)*b.Ctx]
		var e error
		if len(out.Layers) > 0 {
			if r.LayerRelErr, e = layerRelErr(baseLayers, out.Layers); e != nil {
				return e
			}
		}
		base, e := b.LogProbs(w)
		if e != nil {
			return e
		}
		if len(out.Logits) != count*V {
			return fmt.Errorf("window %d: %d logits, want %d", w, len(out.Logits), count*V)
		}
		for i := range count {
			top := LogSoftmax(lp, out.Logits[i*V:(i+1)*V])
			row := base[i*V : (i+1)*V]
			t := Score(row, lp, argmax(row), top, win[first+i+1], first+i)
			t.Window = w
			r.Tokens = append(r.Tokens, t)
		}
		b.Release(w)
		if opt.Progress != nil {
			opt.Progress(1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if g.Prompts > 0 {
		g.PrefixKept /= float64(g.Prompts)
	}
	r.Greedy = g
	r.Seconds = time.Since(start).Seconds()
	r.TokensPerS = float64(tokens) / r.Seconds
	r.Stats = Summarize(r.Tokens)
	r.KLDByPosition = ByPosition(r.Tokens, first, count)
	r.Attribute(nil)
	return r, nil
}

// Attribute sets the per-window figures and, given the text's sample
// spans, the per-sample ones and the worst sample.
func (r *Result) Attribute(sp []Span) {
	r.ByWindow, r.WorstWindow = ByWindow(r.Tokens, r.Window, sp, r.Ctx)
	r.BySample, r.WorstSample = BySample(r.Tokens, sp, r.Ctx)
}

// check adds one prompt: logits [len(cont)*V] are the build's after the
// prompt and each prefix of the base's continuation cont. PrefixKept
// accumulates the sum of kept shares (Evaluate divides).
func (g *Greedy) check(cont []int, logits []float32, V int) {
	d := len(cont)
	for s := range cont {
		if argmax(logits[s*V:(s+1)*V]) != cont[s] {
			d = s
			break
		}
	}
	g.Diverged = append(g.Diverged, d)
	if d == len(cont) {
		g.Exact++
	}
	g.PrefixKept += float64(d) / float64(len(cont))
}

// layerRelErr is sqrt(sum (ref - got)^2 / sum ref^2) per layer.
func layerRelErr(ref, got [][]float32) ([]float64, error) {
	if len(ref) != len(got) {
		return nil, fmt.Errorf("the base has %d layers, the build %d", len(ref), len(got))
	}
	out := make([]float64, len(ref))
	for i := range ref {
		if len(ref[i]) != len(got[i]) {
			return nil, fmt.Errorf("layer %d: base %d values, build %d", i, len(ref[i]), len(got[i]))
		}
		var sig, noise float64
		for k, v := range ref[i] {
			d := float64(v) - float64(got[i][k])
			sig += float64(v) * float64(v)
			noise += d * d
		}
		out[i] = math.Sqrt(noise / sig)
	}
	return out, nil
}

// argmax is the first index of the largest value.
func argmax[T float32 | float64](row []T) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}

// EnsureBase opens the base file at path, computing it first with the
// model open returns when path is "" (a temporary file, removed by the
// returned cleanup), does not exist yet, or opt.Force asks to recompute it.
// path may not be, lie inside or contain any of inputs (the files and
// folders the evaluation reads), and Force replaces only a base file
// sparkconv wrote (BaseOwner). The base model is closed before the build
// is loaded, so the two are never in memory together.
func EnsureBase(path string, open func() (Model, func(), error), text *Text, opt Settings, vocab int, inputs ...string) (*BaseLogits, func(), error) {
	cleanup := func() {}
	var out *outdir.File
	var err error
	switch _, serr := os.Lstat(path); {
	case path == "":
		p, rm, err := tempBase()
		if err != nil {
			return nil, nil, err
		}
		path, cleanup = p, rm
		out, err = outdir.NewFile(path, false, BaseOwner)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
	case serr == nil && !opt.Force: // reused: only read
		if err := outdir.CheckDisjoint(path, inputs...); err != nil {
			return nil, nil, fmt.Errorf("--base-logits: %w", err)
		}
	default:
		if out, err = outdir.NewFile(path, opt.Force, BaseOwner, inputs...); err != nil {
			return nil, nil, fmt.Errorf("--base-logits: %w", err)
		}
	}
	if out != nil {
		m, closeBase, err := open()
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		err = WriteBase(out, m, text, opt)
		closeBase()
		if err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	b, err := OpenBase(path, text, opt, vocab)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return b, func() { b.Close(); cleanup() }, nil
}
