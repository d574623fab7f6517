package qnnbundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"sparkconv/calib"
	"sparkconv/forward"
	"sparkconv/kernels"
	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/ortrun"
	"sparkconv/outdir"
	"sparkconv/progress"
	"sparkconv/qnn"
	"sparkconv/tokenizer"
)

// BarDB is the simulated SNR every layer graph's hidden_out must reach on
// each held-out sequence before a bundle is written without Force: on a phone NPU an uncalibrated
// w4a16 layer (-1.6 dB) and a calibrated w8a8 one (5.1 dB) are far below
// it, a calibrated w8a16 one (36.9 dB) far above
// (docs/qnn.md#device-figures).
const BarDB = 20.0

// Options are the inputs of a bundle (the flags of qnn-bundle).
type Options struct {
	Model, Export, Out string
	Samples            string // calibration text file; "": the embedded corpus
	Precision          qnn.Precision
	Positions          int                // calibration positions per graph
	HeldOut            int                // held-out window per sequence: the first HeldOut tokens of each held-out sample are traced (0: DefaultHeldOut, at most the export's context)
	HeldOutSamples     []string           // held-out text files, each sample its own sequence; none: the built-in held-out text
	HeldOutPositions   int                // positions scored per held-out sequence (ScoredPositions; 0: DefaultHeldOutPositions)
	Observe            int                // positions whose activations set the ranges
	CalibSequences     int                // samples of the calibration text (at most MaxCalibSequences) also traced as sequences of their own, each over its first CalibWindow tokens, whose activations widen the ranges (0: none)
	CalibSeqPositions  int                // positions observed per such sequence (ScoredPositions of its window)
	ObserveGiven       bool               // Observe was asked for (--observe): past the export's context it is refused
	MaskClip           float64            // low end of the attention mask's encoding
	Headroom           float64            // factor widening each 16-bit activation's observed range
	HeadroomTensors    map[string]float64 // tensors (name or last name part) with a factor of their own
	ORTLib             string             // libonnxruntime.so ("": ortrun.FindORTLib's search)
	Threads            int                // ONNX Runtime intra-op threads (0: its default)
	PromoteBelow       float64            // a layer graph of a 4-bit precision whose worst held-out sequence simulates below this many dB is rebuilt at Precision.Promoted() (0: none is)
	Force              bool               // write below BarDB, and replace an existing Out
	AllowShort         bool               // text shorter than the export's context, with a warning
	Log                io.Writer
}

// DefaultHeldOut is each held-out sequence's window, the tokens traced
// from position 0 on, when Options.HeldOut is 0 (fewer where the export's
// context is shorter); ScoredPositions picks the scored ones, the first
// ones (few keys, the attention sink forming) included.
const DefaultHeldOut = 256

// The calibration sequences (Options.CalibSequences): the text's first
// DefaultCalibSequences samples by default, at most MaxCalibSequences,
// each traced over its first CalibWindow tokens (fewer where the export's
// context is shorter) and observed at DefaultCalibSeqPositions of them.
// On the real model the one stream of the export's context of tokens
// leaves layers at 23-28 dB on their worst held-out sequence (the
// down_proj inputs of unseen text went to 4.3x their observed range);
// the 64 samples as sequences of their own lift every layer over 36 dB
// on the built-in held-out text (docs/qnn.md#ranges-that-hold-on-unseen-text).
const (
	DefaultCalibSequences    = 64
	MaxCalibSequences        = 64
	CalibWindow              = 256
	DefaultCalibSeqPositions = 16
)

// ErrRefused is the error of a bundle with a layer whose worst held-out
// sequence simulates below BarDB, without Force (errors.Is): nothing is
// written, the returned Bundle says why (Bundle.Refusal).
var ErrRefused = errors.New("qnn-bundle: refused")

// Run traces the calibration text through the reference forward,
// calibrates and writes every graph of the export, simulates each QDQ graph
// in ONNX Runtime on the held-out sequences and writes bundle.json, all
// into Out at once. A bundle with a layer whose worst held-out sequence
// simulates below BarDB is refused (ErrRefused, with the Bundle that would
// have been written) unless Force.
func Run(ctx context.Context, o Options) (*Bundle, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	start := time.Now()
	man, err := onnxgraph.ReadVerified(o.Export)
	if err != nil {
		return nil, err
	}
	lib, err := ortrun.FindORTLib(o.ORTLib)
	if err != nil {
		return nil, err
	}
	ref, err := forward.Open(o.Model, forward.Options{})
	if err != nil {
		return nil, err
	}
	defer ref.Close()
	if o.HeldOut == 0 {
		o.HeldOut = min(DefaultHeldOut, man.Context)
	}
	if o.HeldOutPositions == 0 {
		o.HeldOutPositions = DefaultHeldOutPositions
	}
	if o.ObserveGiven && o.Observe > man.Context { // as --held-out: refused, never lowered
		return nil, fmt.Errorf("--observe %d: the export's context holds %d positions", o.Observe, man.Context)
	}
	tok, err := tokenizer.Load(filepath.Join(o.Model, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("qnn-bundle needs the model's tokenizer: %w", err)
	}
	b, ids, err := o.text(tok, ref.Cfg.VocabSize, man.Context, ref.Cfg.SlidingWindow)
	if err != nil {
		return nil, err
	}
	held, err := o.heldOut(b, tok, ref.Cfg.VocabSize, man.Context)
	if err != nil {
		return nil, err
	}
	var seqs *HeldOut
	if o.CalibSequences > 0 {
		var files []string
		if o.Samples != "" {
			files = []string{o.Samples}
		}
		n := min(o.CalibSequences, MaxCalibSequences)
		if seqs, err = ReadCalibSequences(tok, files, min(CalibWindow, man.Context), o.CalibSeqPositions, ref.Cfg.VocabSize, n); err != nil {
			return nil, err
		}
		b.Calibration.Sequences = seqs.Seqs
	}
	calibPos, _ := SamplePositions(o.Positions, 0, len(ids)-1)
	heldPos := ScoredPositions(o.HeldOutPositions, held.Longest())
	pos := Positions{Calib: calibPos, Held: heldPos, Observe: ObservePositions(o.Observe, len(ids)-1, calibPos, nil)}
	trace, err := NewStream(ref, man, [][]int{ids}, nil, func(int) string { return "the calibration text" })
	if err != nil {
		return nil, err
	}
	prefill := 0
	if man.Prefill != nil {
		prefill = man.Prefill.Tokens
	}
	if err := held.stream(ref, man, prefill); err != nil {
		return nil, err
	}
	if seqs != nil {
		if err := seqs.stream(ref, man, prefill); err != nil {
			return nil, err
		}
	}
	traced := time.Since(start)
	d, err := outdir.Create(o.Out, o.Force, append([]string{o.Model, o.Export, o.Samples, lib}, o.HeldOutSamples...)...)
	if err != nil {
		return nil, err
	}
	defer d.Abort()
	if err := os.MkdirAll(filepath.Join(d.Path(), QDQDir), 0o755); err != nil {
		return nil, err
	}
	manSHA, err := onnxio.HashFile(filepath.Join(o.Export, onnxgraph.ManifestFile))
	if err != nil {
		return nil, err
	}
	if err := ortrun.Init(lib); err != nil {
		return nil, err
	}
	b.Format, b.Version, b.Precision = "sparkconv-qnn-bundle", 1, o.Precision.Name
	b.WeightBits, b.ActBits, b.EncodingsVer = o.Precision.WeightBits, o.Precision.ActBits, qnn.EncodingsVersion
	b.Recipe = RecipeOf(o.Precision)
	if o.Precision.Promotes() && o.PromoteBelow > 0 {
		b.PromoteBelow = o.PromoteBelow
		if b.Recipe != nil {
			b.Recipe.PromotedGrid = RecipeOf(o.Precision.Promoted()).WeightGrid
		}
	}
	b.Graphs = map[string]*GraphResult{}
	b.Export = BundleExport{ManifestSHA256: manSHA.SHA256, Context: man.Context, Layout: man.Layout, Granularity: man.Granularity}
	b.Calibration.Observed, b.Calibration.Kernels = pos.Observe, kernels.Family()
	b.Calibration.Positions, b.Calibration.HeldOut, b.Calibration.Seconds = calibPos, heldPos, round2(traced.Seconds())
	b.Calibration.Headroom, b.Calibration.HeadroomTensors = o.Headroom, o.HeadroomTensors
	b.Mask = BundleMask{MaskValue: man.MaskValue, EncodedRange: [2]float64{o.MaskClip, 0},
		Note: "the runtime feeds mask_value for empty slots; the input quantizer saturates it to the encoded low end, whose exp() still hides the slot"}
	var ppos Positions
	if man.Prefill != nil {
		if ppos, err = PrefillPositions(man.Prefill.Tokens, len(ids), held.Longest(), len(calibPos)); err != nil {
			return nil, err
		}
		b.Prefill = &BundlePrefill{Tokens: man.Prefill.Tokens, Observed: ppos.Observe, Chunks: ppos.Calib, HeldOut: ppos.Held}
	}
	if err := o.graphs(ctx, b, d.Path(), man, trace, held, seqs, pos, ppos); err != nil {
		return nil, err
	}
	if why := b.Refusal(); why != "" {
		if !o.Force {
			return b, fmt.Errorf("%w: %s; nothing written to %s (--force writes it anyway)", ErrRefused, why, o.Out)
		}
		b.Forced, b.ForcedBecause = true, why
	}
	data, err := b.Marshal()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(d.Path(), BundleFile), data, 0o644); err != nil {
		return nil, err
	}
	return b, d.Commit()
}

// text reads and tokenizes the calibration text (the export's context of
// tokens), applies the rules on it (qnnbundle's on its length, calib's on
// degenerate text, every problem at once, warnings to Log), and starts the
// bundle's record of it.
func (o Options) text(tok *tokenizer.Tokenizer, vocab, context, window int) (*Bundle, []int, error) {
	var files []string
	if o.Samples != "" {
		files = []string{o.Samples}
	}
	src := calib.Source{Files: files, Default: calib.CalibText, Tok: tok, Vocab: vocab, Log: o.Log,
		Also: func(tokens int) (string, error) { return CheckTextLength(tokens, context, window, o.AllowShort) }}
	text, err := src.Take(&calib.Prefix{Tokens: context, SeqLen: max(context, 1)})
	if err != nil {
		return nil, nil, err
	}
	var ids []int
	for _, c := range text.Chunks {
		ids = append(ids, c.IDs...)
	}
	rd, source := text.Read, text.Where()
	b := &Bundle{Calibration: BundleCalibration{Source: source, TextSHA256: rd.SHA256, Samples: rd.Samples, Tokens: len(ids)}}
	return b, ids, nil
}

// heldOut reads and tokenizes the held-out text the simulation scores
// (HeldOutSamples, or the built-in held-out text, disjoint from the
// embedded corpus; ReadHeldOut): each sample a sequence, traced over its
// first HeldOut tokens and scored at HeldOutPositions of them. It records
// the files and the sequences in b.
func (o Options) heldOut(b *Bundle, tok *tokenizer.Tokenizer, vocab, context int) (*HeldOut, error) {
	if err := CheckHeldOut(o.HeldOut, context); err != nil {
		return nil, err
	}
	h, err := ReadHeldOut(tok, o.HeldOutSamples, o.HeldOut, o.HeldOutPositions, vocab)
	if err != nil {
		return nil, err
	}
	b.Calibration.HeldOutFiles, b.Calibration.HeldOutSequences = h.Files, h.Seqs
	return h, nil
}

// graphs calibrates, writes and simulates every graph of the export into
// dir, recording each in b (and in b.Simulation the lowest layer SNRs).
// A prefill graph follows its decode graph, at the chunk starts ppos, tied
// to the encodings the decode graph got.
func (o Options) graphs(ctx context.Context, b *Bundle, dir string, man *onnxgraph.Manifest, trace *Stream, held, seqs *HeldOut, pos, ppos Positions) error {
	graphs := onnxgraph.GraphOrder(man)
	pre := onnxgraph.PrefillOf(man)
	bar := progress.New(int64(len(man.AllGraphs())), "qnn-bundle", false)
	var qdq, qdqPre []onnxgraph.GraphEntry
	var jobs []graphJob
	for _, e := range graphs {
		jobs = append(jobs, graphJob{e: e, pos: pos})
		if pg, ok := pre[e.Name]; ok {
			jobs = append(jobs, graphJob{e: pg, pos: ppos, dec: &e})
		}
	}
	var t graphTimes
	promoted := map[string]bool{} // decode graphs rebuilt at o.Precision.Promoted()
	for _, j := range jobs {
		e := j.e
		if err := ctx.Err(); err != nil {
			return err
		}
		bar.Describe(e.File)
		tt := time.Now()
		cal, err := trace.Traces(e)
		if err != nil {
			return err
		}
		for _, h := range []*HeldOut{held, seqs} {
			if h != nil {
				if err := h.at(e); err != nil {
					return err
				}
			}
		}
		t.trace += time.Since(tt)
		prec := o.Precision
		if j.dec != nil && promoted[j.dec.Name] {
			prec = prec.Promoted()
		}
		res, qe, err := o.graph(dir, j, cal[0], held, seqs, prec, &t)
		if err != nil {
			return err
		}
		if j.dec == nil && o.promotes(res) {
			first := res
			if err := first.remove(dir, e); err != nil {
				return err
			}
			if res, qe, err = o.graph(dir, j, cal[0], held, seqs, prec.Promoted(), &t); err != nil {
				return err
			}
			res.Promoted = &Promotion{FromBits: prec.WeightBits, SNR: first.SNR, SNRWorstSeq: first.SNRWorstSeq, WorstSeq: first.WorstSeq}
			promoted[e.Name] = true
			b.Promoted = append(b.Promoted, e.Name)
		}
		b.Graphs[e.Name] = res
		b.GraphOrder = append(b.GraphOrder, e.Name)
		if j.dec != nil {
			qdqPre = append(qdqPre, *qe)
		} else {
			qdq = append(qdq, *qe)
		}
		bar.Add(1)
	}
	bar.Done(true)
	if err := WriteQDQManifest(dir, man, qdq, qdqPre); err != nil {
		return err
	}
	b.Calibration.Seconds = round2(b.Calibration.Seconds + t.trace.Seconds())
	b.Calibration.CalibrateSeconds = round2(t.calibrate.Seconds())
	b.Simulation = &BundleSimulation{Runtime: "ONNX Runtime " + ortrun.Version(), Optimize: SimOptimize,
		Seconds: round2(t.simulate.Seconds()), BarDB: BarDB}
	b.Simulation.MinSNR, _ = b.lowest(func(r *GraphResult) *float64 { return r.SNR })
	b.Simulation.MinSeqSNR, b.Simulation.MinSeqGraph = b.lowest(func(r *GraphResult) *float64 { return r.SNRWorstSeq })
	return nil
}

// graphJob is one graph of the bundle: a decode graph, or a prefill graph
// after its decode graph dec.
type graphJob struct {
	e   onnxgraph.GraphEntry
	pos Positions
	dec *onnxgraph.GraphEntry
}

// graphTimes add up where a bundle's time goes.
type graphTimes struct{ trace, calibrate, simulate time.Duration }

// promotes reports whether a decode layer graph built at o.Precision is
// rebuilt at o.Precision.Promoted(): its worst held-out sequence simulates
// below o.PromoteBelow.
func (o Options) promotes(res *GraphResult) bool {
	return o.PromoteBelow > 0 && o.Precision.Promotes() && res.isLayer() &&
		res.SNRWorstSeq != nil && *res.SNRWorstSeq < o.PromoteBelow
}

// graph calibrates j's graph at prec on its trace cal, writes it under dir
// and simulates its QDQ graph on the held-out sequences.
func (o Options) graph(dir string, j graphJob, cal *Trace, held, seqs *HeldOut, prec qnn.Precision, t *graphTimes) (*GraphResult, *onnxgraph.GraphEntry, error) {
	e := j.e
	t0 := time.Now()
	samples, runs := held.samples(e)
	ro := RangeOptions{MaskClip: o.MaskClip, Headroom: o.Headroom, Wider: o.HeadroomTensors, Held: samples}
	if seqs != nil {
		ro.More, _ = seqs.samples(e)
	}
	if j.dec != nil {
		dec, err := qnn.ReadEncodings(filepath.Join(dir, j.dec.Name+".aimet", j.dec.Name+".encodings"))
		if err != nil {
			return nil, nil, err
		}
		ro.Tie = PrefillTies(dec, *j.dec, e)
		if prec.Search {
			ro.Params = map[string]qnn.Encoding{}
			for _, p := range dec.Params {
				ro.Params[p.Name] = p
			}
		}
		if prec.Solve {
			if ro.Weights, err = decodeWeights(filepath.Join(dir, j.dec.Name+".aimet", j.dec.Name+".onnx"), dec); err != nil {
				return nil, nil, err
			}
		}
	}
	res, qe, err := BundleGraph(o.Export, dir, cal, e, j.pos, prec, ro)
	if err != nil {
		return nil, nil, err
	}
	t1 := time.Now()
	sim, err := Simulate(filepath.Join(dir, QDQDir, e.File), e, samples, len(held.Seqs), o.Threads)
	if err != nil {
		return nil, nil, err
	}
	t.calibrate, t.simulate = t.calibrate+t1.Sub(t0), t.simulate+time.Since(t1)
	res.SNR = finite(float64(sim.SNR))
	if sim.Delta != nil {
		res.SNRDelta = finite(float64(*sim.Delta))
	}
	res.Top1, res.Held, res.Kind = sim.Top1, runs, e.Kind
	res.SNRWorst, res.WorstPos, res.WorstPosSeq = finite(sim.Worst), sim.WorstPos, sim.WorstPosSeq
	res.SNRWorstSeq, res.WorstSeq = finite(sim.WorstSeq), sim.WorstSeqIdx
	res.SNRSequences = make([]*float64, len(sim.Sequences))
	for i, v := range sim.Sequences {
		res.SNRSequences[i] = finite(v)
	}
	if prec.WeightBits != o.Precision.WeightBits { // promoted, or the prefill graph of a promoted graph
		res.WeightBits = prec.WeightBits
	}
	return res, qe, nil
}

func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	r := round2(v)
	return &r
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// WriteSummary prints the bundle's per-graph lines and totals to w: what
// was written to out (wrote), or what would have been (a refusal).
func (b *Bundle) WriteSummary(w io.Writer, out string, took time.Duration, wrote bool) {
	fmt.Fprintf(w, "qnn-bundle %s: %d calibration positions of %d tokens (%s), %d held-out sequences of up to %d positions, mask encoded over [%g, 0]\n",
		b.Precision, len(b.Calibration.Positions), b.Calibration.Tokens, b.Calibration.Source, len(b.Calibration.HeldOutSequences), len(b.Calibration.HeldOut), b.Mask.EncodedRange[0])
	var total int64
	for _, name := range b.GraphOrder {
		r := b.Graphs[name]
		total += r.Bytes
		line := fmt.Sprintf("  %-16s %5d act %4d param encodings  simulated %s dB, worst sequence %s dB (%d)", name, r.Activations, r.Params, fmtPtr(r.SNR), fmtPtr(r.SNRWorstSeq), r.WorstSeq)
		if r.SNRDelta != nil {
			line += fmt.Sprintf(", delta %s dB", fmtPtr(r.SNRDelta))
		}
		if r.Top1 != nil {
			line += fmt.Sprintf(", top-1 %.0f%%", 100**r.Top1)
		}
		if len(r.Overflows) > 0 {
			w := r.Overflows[0]
			line += fmt.Sprintf(", held-out past range: %d tensors, worst %s %.2fx (sequence %d position %d)", r.OverflowTensors, w.Tensor, w.Times, w.Seq, w.Pos)
		}
		if r.Search != nil {
			line += fmt.Sprintf(", weights searched %+.1f dB", r.Search.GainDB)
		}
		if p := r.Promoted; p != nil {
			line += fmt.Sprintf(", promoted to %d-bit weights (at %d bits: worst sequence %s dB (%d))", r.WeightBits, p.FromBits, fmtPtr(p.SNRWorstSeq), p.WorstSeq)
		}
		fmt.Fprintln(w, line)
	}
	if b.PromoteBelow > 0 {
		fmt.Fprintf(w, "qnn-bundle: %d of the layer graphs promoted to %d-bit weights (worst held-out sequence under %g dB at %d bits)\n", len(b.Promoted), qnn.PromotedBits, b.PromoteBelow, b.WeightBits)
	}
	verb := "wrote"
	if !wrote {
		verb = "would write"
	}
	fmt.Fprintf(w, "qnn-bundle: %s %s: %.1f MB; trace %.1fs, ranges and files %.1fs, simulation %.1fs, %.1fs in all\n", verb, out, float64(total)/1e6, b.Calibration.Seconds, b.Calibration.CalibrateSeconds, b.Simulation.Seconds, took.Seconds())
}

func fmtPtr(v *float64) string {
	if v == nil {
		return "inf"
	}
	return fmt.Sprintf("%.1f", *v)
}
