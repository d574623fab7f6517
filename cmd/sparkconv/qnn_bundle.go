package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sparkconv/calib"
	"sparkconv/eval"
	"sparkconv/fixtures"
	"sparkconv/forward"
	"sparkconv/infile"
	"sparkconv/kernels"
	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/ortrun"
	"sparkconv/outdir"
	"sparkconv/progress"
	"sparkconv/qnn"
	"sparkconv/verify"
)

// bundleBarDB is the simulated SNR every layer graph's hidden_out must
// reach before a bundle is written without --force: on a phone NPU an
// uncalibrated w4a16 layer (-1.6 dB) and a calibrated w8a8 one (5.1 dB) are
// far below it, a calibrated w8a16 one (36.9 dB) far above
// (docs/qnn.md#device-figures).
const bundleBarDB = 20.0

type qnnBundleFlags struct {
	model, export, out, samples, precision, ortLib string
	heldSamples                                    string
	positions, observe, held, threads              int
	maskClip, headroom                             float64
	force, allowShort                              bool
}

func init() {
	var f qnnBundleFlags
	cmd := &cobra.Command{
		Use:   "qnn-bundle --model DIR --export DIR --out DIR",
		Short: "Calibrate an ONNX export on real text and write the AIMET bundle QNN / AI Hub quantizes",
		Long: `Runs calibration text through the reference forward in decode mode, exactly as
a runtime feeds each graph of the export (ring and roll caches, masks, rope
inputs, hidden states), captures every graph input at positions spread over
the window and the context, and writes per graph:

  OUT/<graph>.aimet/<graph>.onnx       the float graph (the export's bytes)
  OUT/<graph>.aimet/<graph>.encodings  AIMET 1.0.0 encodings: weights symmetric per
                                       output channel from the weights, activations
                                       asymmetric from the observed ranges; KV inputs
                                       tied to their new_*/present_* outputs, Concat
                                       inputs and output tied, no encoding inside a
                                       fusable RMSNorm or GELU pattern
  OUT/calib/<graph>.npz                the calibration inputs, {input name: samples}
  OUT/qdq/                             the QDQ simulation graphs (an export folder)
  OUT/bundle.json                      what was calibrated, per-graph simulated SNR

The attention mask is encoded over [--mask-clip, 0] (default -50), not
[mask_value, 0]: the runtime keeps writing mask_value (-1e4), the input
quantizer saturates it, and exp(-50) still hides the slot.

16-bit activation ranges are the observed ones widened --headroom times
(default 2; not the Softmax/Sigmoid outputs, the rope tables or the mask):
text the calibration never saw goes past the observed ranges.

Each QDQ graph then runs in ONNX Runtime against the float32 reference on
held-out text (--held-out-samples, default eval's built-in held-out text),
at every position 0..--held-out-1: SNR of hidden_out and of the residual
delta, each position weighted equally, the worst position, the head's
top-1 agreement. A bundle whose worst layer scores below 20 dB (w8a8
typically) is refused unless --force (which also replaces an existing OUT).`,
		Example: `  sparkconv qnn-bundle --model /tmp/spark-tiny --export /tmp/spark-tiny-onnx --out /tmp/spark-tiny-qnn
  sparkconv qnn-bundle --model DIR --export ONNX --out QNN --precision w16a16 --samples corpus.txt --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runQNNBundle(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "the model folder the export was made from (config.json, safetensors, tokenizer.json)")
	fl.StringVar(&f.export, "export", "", "the export-onnx output folder (float32)")
	fl.StringVar(&f.out, "out", "", "output folder")
	fl.StringVar(&f.samples, "samples", "", "calibration text (samples separated by lines holding ---, or .jsonl); default: the embedded calibration corpus")
	fl.StringVar(&f.precision, "precision", "w8a16", "w8a16, w16a16 or w8a8")
	fl.IntVar(&f.positions, "positions", 16, "calibration positions per graph")
	fl.IntVar(&f.observe, "observe", 128, "positions whose activations set the ranges (the --positions ones among them)")
	fl.IntVar(&f.held, "held-out", 256, "held-out positions for the simulation: every position 0..N-1 of the held-out text")
	fl.StringVar(&f.heldSamples, "held-out-samples", "", "held-out text the simulation scores (as --samples); default: eval's built-in held-out text, disjoint from the calibration corpus")
	fl.Float64Var(&f.headroom, "headroom", qnn.Headroom, "factor widening each 16-bit activation's observed range (1: min/max as observed)")
	fl.Float64Var(&f.maskClip, "mask-clip", qnn.MaskClip, "low end of the attention mask's encoding (negative; mask_value saturates to it)")
	fl.StringVar(&f.ortLib, "ort-lib", "", "path of libonnxruntime.so (default: $SPARKCONV_ORT_LIB, then .ort/ in the repository)")
	fl.IntVar(&f.threads, "threads", 0, "ONNX Runtime intra-op threads (0: its default)")
	fl.BoolVar(&f.force, "force", false, "write a bundle below the SNR bar, and replace an existing output folder")
	fl.BoolVar(&f.allowShort, "allow-short", false, "bundle calibration text shorter than the export's context, with a warning giving the numbers")
	freeForm(cmd, "model", "export", "out", "samples", "held-out-samples", "ort-lib")
	var precisions []string
	for _, p := range qnn.Precisions {
		precisions = append(precisions, p.Name)
	}
	oneOf(cmd, "precision", precisions...)
	intIn(cmd, "positions", 1, 4096)
	intIn(cmd, "observe", 0, 1<<20)
	intIn(cmd, "held-out", 1, 4096)
	intIn(cmd, "threads", 0, 1024)
	floatIn(cmd, "mask-clip", -1e6, -1e-9)
	floatIn(cmd, "headroom", 1, 16)
	rootCmd.AddCommand(cmd)
}

func (f *qnnBundleFlags) check() (qnn.Precision, error) {
	if f.model == "" || f.export == "" || f.out == "" {
		return qnn.Precision{}, usagef("--model, --export and --out are required")
	}
	// The flag rules (intIn, floatIn, oneOf) have checked every value's
	// range and word before the command runs.
	prec, err := qnn.ParsePrecision(f.precision)
	if err != nil {
		return prec, usagef("--precision: %v", err)
	}
	return prec, nil
}

// bundleText returns the calibration samples (def and its name when path
// is empty), where they came from, and the sha256 of their bytes.
func bundleText(path, def, defName string) ([]calib.Text, string, string, error) {
	data, name := []byte(def), defName
	if path != "" {
		var err error
		if data, err = infile.ReadFile(path, infile.TextMax); err != nil {
			return nil, "", "", err
		}
		name = path
	}
	texts, err := calib.ParseSamples(data, name, strings.EqualFold(filepath.Ext(path), ".jsonl"))
	if err != nil {
		return nil, "", "", err
	}
	sum := sha256.Sum256(data)
	return texts, name, hex.EncodeToString(sum[:]), nil
}

// streamTokens concatenates the samples' tokens (each with the tokenizer's
// special tokens) up to n tokens, and returns them with the tokenizer's
// unknown token (-1: none).
func streamTokens(modelDir string, texts []calib.Text, vocab, n int) ([]int, int, error) {
	tok, unk, err := loadTokenizerUnk(modelDir)
	if err != nil {
		return nil, 0, fmt.Errorf("qnn-bundle needs the model's tokenizer: %w", err)
	}
	chunks, _, err := calib.Tokenize(tok, texts, n, vocab)
	if err != nil {
		return nil, 0, err
	}
	var ids []int
	for _, c := range chunks {
		ids = append(ids, c.IDs...)
		if len(ids) >= n {
			return ids[:n], unk, nil
		}
	}
	return ids, unk, nil
}

// checkBundleText applies the rules on calibration text (qnn's on its
// length, calib's on degenerate text), every problem at once, and prints
// their warnings.
func checkBundleText(cmd *cobra.Command, f *qnnBundleFlags, source string, ids []int, unk, vocab, context, window int) error {
	lenWarn, lenErr := qnn.CheckTextLength(len(ids), context, window, f.allowShort)
	warn, varErr := calib.CheckVariety([]calib.Chunk{{IDs: ids}}, unk, vocab)
	if err := errors.Join(lenErr, varErr); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	for _, w := range []string{lenWarn, warn} {
		if w != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "sparkconv: warning: %s: %s\n", source, w)
		}
	}
	return nil
}

func runQNNBundle(cmd *cobra.Command, f *qnnBundleFlags) error {
	prec, err := f.check()
	if err != nil {
		return err
	}
	start := time.Now()
	man, err := onnxgraph.ReadVerified(f.export)
	if err != nil {
		return err
	}
	lib, err := ortrun.FindORTLib(f.ortLib)
	if err != nil {
		return err
	}
	texts, source, textSHA, err := bundleText(f.samples, fixtures.Corpus, "embedded calibration corpus")
	if err != nil {
		return err
	}
	heldTexts, heldSource, heldSHA, err := bundleText(f.heldSamples, eval.HeldOut, eval.HeldOutName)
	if err != nil {
		return err
	}
	ref, err := forward.Open(f.model, forward.Options{})
	if err != nil {
		return err
	}
	defer ref.Close()
	ids, unk, err := streamTokens(f.model, texts, ref.Cfg.VocabSize, man.Context)
	if err != nil {
		return err
	}
	if err := checkBundleText(cmd, f, source, ids, unk, ref.Cfg.VocabSize, man.Context, ref.Cfg.SlidingWindow); err != nil {
		return err
	}
	heldIDs, _, err := streamTokens(f.model, heldTexts, ref.Cfg.VocabSize, f.held)
	if err != nil {
		return err
	}
	if err := qnn.CheckHeldOut(len(heldIDs), f.held, man.Context); err != nil {
		return fmt.Errorf("%s: %w", heldSource, err)
	}
	calibPos, _ := qnn.SamplePositions(f.positions, 0, len(ids)-1)
	heldPos := make([]int, f.held)
	for i := range heldPos {
		heldPos[i] = i
	}
	pos := qnn.Positions{Calib: calibPos, Held: heldPos, Observe: qnn.ObservePositions(f.observe, len(ids)-1, calibPos, nil)}
	trace, err := qnn.NewTrace(ref, man, ids, nil)
	if err != nil {
		return err
	}
	heldTrace, err := qnn.NewTrace(ref, man, heldIDs, heldPos)
	if err != nil {
		return err
	}
	traced := time.Since(start)
	d, err := outdir.Create(f.out, f.force, f.model, f.export, f.samples)
	if err != nil {
		return err
	}
	defer d.Abort()
	if err := os.MkdirAll(filepath.Join(d.Path(), qnn.QDQDir), 0o755); err != nil {
		return err
	}
	manSHA, err := onnxio.HashFile(filepath.Join(f.export, onnxgraph.ManifestFile))
	if err != nil {
		return err
	}
	if err := ortrun.Init(lib); err != nil {
		return err
	}
	b := &qnn.Bundle{Format: "sparkconv-qnn-bundle", Version: 1, Precision: prec.Name, WeightBits: prec.WeightBits, ActBits: prec.ActBits,
		EncodingsVer: qnn.EncodingsVersion, Graphs: map[string]*qnn.GraphResult{},
		Export: qnn.BundleExport{ManifestSHA256: manSHA.SHA256, Context: man.Context, Layout: man.Layout, Granularity: man.Granularity},
		Calibration: qnn.BundleCalibration{Source: source, TextSHA256: textSHA, Samples: len(texts), Tokens: len(ids),
			Observed: pos.Observe, Kernels: kernels.Family(), Positions: calibPos, HeldOut: heldPos, HeldOutSource: heldSource, HeldOutSHA256: heldSHA,
			Headroom: f.headroom, Seconds: round2(traced.Seconds())},
		Mask: qnn.BundleMask{MaskValue: man.MaskValue, EncodedRange: [2]float64{f.maskClip, 0},
			Note: "the runtime feeds mask_value for empty slots; the input quantizer saturates it to the encoded low end, whose exp() still hides the slot"}}
	graphs := onnxgraph.GraphOrder(man)
	bar := progress.New(int64(len(graphs)), "qnn-bundle", false)
	var qdq []onnxgraph.GraphEntry
	worst, worstName := math.Inf(1), ""
	var calTime, simTime time.Duration
	for _, e := range graphs {
		if err := cmd.Context().Err(); err != nil {
			return err
		}
		bar.Describe(e.File)
		t0 := time.Now()
		res, qe, err := qnn.BundleGraph(f.export, d.Path(), trace, e, pos, prec, qnn.RangeOptions{MaskClip: f.maskClip, Headroom: f.headroom})
		if err != nil {
			return err
		}
		t1 := time.Now()
		held := func(fn func(qnn.Sample) error) error { return heldTrace.Samples(e, heldPos, true, fn) }
		sim, err := verify.Simulate(filepath.Join(d.Path(), qnn.QDQDir, e.File), e, held, f.threads)
		if err != nil {
			return err
		}
		calTime, simTime = calTime+t1.Sub(t0), simTime+time.Since(t1)
		v := float64(sim.SNR)
		res.SNR = finite(v)
		if sim.Delta != nil {
			res.SNRDelta = finite(float64(*sim.Delta))
		}
		res.Top1 = sim.Top1
		res.SNRWorst, res.WorstPos = finite(float64(sim.Worst)), sim.WorstPos
		if (e.Kind == onnxgraph.KindLayer || e.Kind == onnxgraph.KindBlock) && v < worst {
			worst, worstName = v, e.Name
		}
		b.Graphs[e.Name] = res
		b.GraphOrder = append(b.GraphOrder, e.Name)
		qdq = append(qdq, *qe)
		bar.Add(1)
	}
	bar.Done(true)
	if err := qnn.WriteQDQManifest(d.Path(), man, qdq); err != nil {
		return err
	}
	b.Calibration.CalibrateSeconds = round2(calTime.Seconds())
	b.Simulation = &qnn.BundleSimulation{Runtime: "ONNX Runtime " + ortrun.Version(), Optimize: verify.SimOptimize,
		Seconds: round2(simTime.Seconds()), MinSNR: round2(worst), BarDB: bundleBarDB}
	if worst < bundleBarDB {
		why := fmt.Sprintf("%s simulates at %.1f dB on %s (bar %.0f dB: below it a layer is unusable on the device, where calibrated w8a8 measures 5.1 dB and w8a16 36.9)", prec.Name, worst, worstName, bundleBarDB)
		if !f.force {
			printBundle(cmd, b, f.out, time.Since(start), false)
			return fmt.Errorf("qnn-bundle: refused: %s; nothing written to %s (--force writes it anyway)", why, f.out)
		}
		b.Forced, b.ForcedBecause = true, why
	}
	data, err := b.Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.Path(), qnn.BundleFile), data, 0o644); err != nil {
		return err
	}
	if err := d.Commit(); err != nil {
		return err
	}
	if jsonOut {
		return printJSON(struct {
			*qnn.Bundle
			Out     string             `json:"out"`
			Timings map[string]float64 `json:"timing"`
		}{b, f.out, map[string]float64{"trace_s": b.Calibration.Seconds, "calibrate_s": b.Calibration.CalibrateSeconds,
			"simulate_s": b.Simulation.Seconds, "total_s": round2(time.Since(start).Seconds())}})
	}
	printBundle(cmd, b, f.out, time.Since(start), true)
	return nil
}

func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	r := round2(v)
	return &r
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func printBundle(cmd *cobra.Command, b *qnn.Bundle, out string, took time.Duration, wrote bool) {
	w := cmd.ErrOrStderr()
	if wrote {
		w = cmd.OutOrStdout()
	}
	fmt.Fprintf(w, "qnn-bundle %s: %d calibration + %d held-out positions of %d tokens (%s), mask encoded over [%g, 0]\n",
		b.Precision, len(b.Calibration.Positions), len(b.Calibration.HeldOut), b.Calibration.Tokens, b.Calibration.Source, b.Mask.EncodedRange[0])
	var total int64
	for _, name := range b.GraphOrder {
		r := b.Graphs[name]
		total += r.Bytes
		line := fmt.Sprintf("  %-10s %5d act %4d param encodings  simulated %s dB", name, r.Activations, r.Params, fmtPtr(r.SNR))
		if r.SNRDelta != nil {
			line += fmt.Sprintf(", delta %s dB", fmtPtr(r.SNRDelta))
		}
		if r.Top1 != nil {
			line += fmt.Sprintf(", top-1 %.0f%%", 100**r.Top1)
		}
		fmt.Fprintln(w, line)
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
