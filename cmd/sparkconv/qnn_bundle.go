package main

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sparkconv/ortrun"
	"sparkconv/outdir"
	"sparkconv/qnn"
	"sparkconv/qnnbundle"
)

type qnnBundleFlags struct {
	qnnbundle.Options
	precision       string
	headroomTensors map[string]string
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

--precision w4a16 is Qualcomm's LLM recipe: 4-bit weights per output channel,
each channel's scale chosen by its output error on the observed activations
(SeqMSE's search), 16-bit activations, the head's weights and the KV cache
(8-bit symmetric) at 8 bits, the embedding table at 16. --precision w4a16-lpbq
is the same recipe with the layers' 4-bit weights in AIMET LPBQ blocks of 64
input rows (an integer scale per block under a float scale per output
channel, each block's scale chosen by its output error, the codes then
solved by GPTQ on that grid), as qai-hub-models' _set_4bit_weights_to_lpbq
writes them. In both, a layer graph whose worst
held-out sequence simulates below --promote-below dB (default 20, the bar)
with 4-bit weights is rebuilt with 8-bit weights per output channel (the
rest of the recipe as it was); bundle.json lists the promoted graphs
(promoted) and each one's figures at 4 bits (promoted_from).

The ranges are observed on the calibration text's first context of tokens
as one stream and on its first --calib-sequences samples (default 64),
each traced as a sequence of its own from position 0 (a new conversation)
over its first 256 tokens and observed at --calib-sequence-positions of
them. 16-bit activation ranges are the observed ones widened --headroom
times (default 2; not the Softmax/Sigmoid outputs, the rope tables or the
mask), each layer's down_proj input (mlp_act) 8 times by default
(--headroom-tensor): text the calibration never saw goes past the observed
ranges, the down_proj input farthest. bundle.json's held_out_overflows name
per graph the tensors the held-out text drove past their encoded ranges.

Each QDQ graph then runs in ONNX Runtime against the float32 reference on
held-out text (--held-out-samples, repeatable, default the built-in
held-out text), each sample traced as a sequence of its own from position
0 (a new conversation) over its first --held-out tokens and scored at
--held-out-positions of them (default 32: 0, 1, 2, ... dense at the start,
then spread to the last). bundle.json says per graph:

  snr_db                 SNR of hidden_out (the head: logits), each position of
                         every sequence weighted equally (pooled)
  snr_delta_db           the same for the residual delta hidden_out - hidden_in
  snr_sequences_db       each held-out sequence's SNR over its own positions
  snr_worst_sequence_db  the lowest of them, of sequence worst_sequence_sample
                         (an index into calibration.held_out_sequences)
  snr_worst_db           the worst single position: worst_position of
                         sequence worst_position_sample
  top1_agree             the head's share of positions with the same arg-max

and calibration.held_out_files / held_out_sequences name the texts read
(source, sha256) and each sequence (source, sample, tokens, positions).
A bundle in which any layer scores below 20 dB on its worst held-out
sequence (w8a8 typically) is refused unless --force (which also replaces an
existing OUT): the error names the layer, the sequence and the dB.`,
		Example: `  sparkconv qnn-bundle --model /tmp/spark-tiny --export /tmp/spark-tiny-onnx --out /tmp/spark-tiny-qnn
  sparkconv qnn-bundle --model DIR --export ONNX --out QNN --precision w16a16 --samples corpus.txt --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Model, "model", "", "the model folder the export was made from (config.json, safetensors, tokenizer.json)")
	fl.StringVar(&f.Export, "export", "", "the export-onnx output folder (float32)")
	fl.StringVar(&f.Out, "out", "", "output folder")
	fl.StringVar(&f.Samples, "samples", "", "calibration text (samples separated by lines holding ---, or .jsonl); default: the embedded corpus")
	fl.StringVar(&f.precision, "precision", "w8a16", "w8a16, w16a16, w8a8, w4a16 (4-bit weights per channel searched on the calibration activations; head weights and KV cache at 8 bits) or w4a16-lpbq (w4a16 with the 4-bit weights in LPBQ blocks of 64)")
	fl.IntVar(&f.Positions, "positions", 16, "calibration positions per graph")
	fl.IntVar(&f.Observe, "observe", 128, "positions whose activations set the ranges (the --positions ones among them)")
	fl.IntVar(&f.CalibSequences, "calib-sequences", qnnbundle.DefaultCalibSequences, "the calibration text's first N samples also traced as sequences of their own (each from position 0, over its first 256 tokens), whose activations widen the ranges (0: the one stream only)")
	fl.IntVar(&f.CalibSeqPositions, "calib-sequence-positions", qnnbundle.DefaultCalibSeqPositions, "positions observed per --calib-sequences sequence (0, 1, 2, ... then spaced in log(1+p) to the window's last)")
	fl.IntVar(&f.HeldOut, "held-out", 0, "held-out window per sequence: the first N tokens of each held-out sample are traced, fewer where the sample is shorter (0: 256, or the export's context where it is shorter)")
	fl.IntVar(&f.HeldOutPositions, "held-out-positions", qnnbundle.DefaultHeldOutPositions, "positions of each held-out window the simulation scores: 0, 1, 2, ... then spaced evenly in log(1+p) to the window's last (every position when it is at least the window)")
	fl.StringArrayVar(&f.HeldOutSamples, "held-out-samples", nil, "held-out text the simulation scores, each sample its own sequence (samples separated by lines holding ---, or .jsonl); repeatable; default: the built-in held-out text, disjoint from the calibration corpus")
	fl.Float64Var(&f.Headroom, "headroom", qnn.Headroom, "factor widening each 16-bit activation's observed range (1: min/max as observed)")
	fl.StringToStringVar(&f.headroomTensors, "headroom-tensor", nil, "NAME=FACTOR: a 16-bit activation's own headroom in place of --headroom, by tensor name or its last part (mlp_act: every layer's down_proj input); repeatable; default, unless --headroom or this flag is given: mlp_act=8")
	fl.Float64Var(&f.MaskClip, "mask-clip", qnn.MaskClip, "low end of the attention mask's encoding (negative; mask_value saturates to it)")
	fl.StringVar(&f.ORTLib, "ort-lib", "", "path of libonnxruntime.so (default: $SPARKCONV_ORT_LIB, then .ort/ in the repository)")
	fl.IntVar(&f.Threads, "threads", 0, "ONNX Runtime intra-op threads (0: its default)")
	fl.Float64Var(&f.PromoteBelow, "promote-below", qnnbundle.BarDB, "w4a16 and w4a16-lpbq: a layer graph whose worst held-out sequence simulates below this many dB with 4-bit weights is rebuilt with 8-bit weights per channel (0: never)")
	fl.BoolVar(&f.Force, "force", false, "write a bundle below the SNR bar, and replace an existing output folder")
	fl.BoolVar(&f.AllowShort, "allow-short", false, "bundle calibration text shorter than the export's context, with a warning giving the numbers")
	freeForm(cmd, "model", "export", "out", "samples", "held-out-samples", "ort-lib")
	var precisions []string
	for _, p := range qnn.Precisions {
		precisions = append(precisions, p.Name)
	}
	oneOf(cmd, "precision", precisions...)
	intIn(cmd, "positions", 1, 4096)
	intIn(cmd, "observe", 0, 1<<20)
	intIn(cmd, "held-out", 0, 4096)
	intIn(cmd, "calib-sequences", 0, qnnbundle.MaxCalibSequences)
	intIn(cmd, "calib-sequence-positions", 1, 4096)
	intIn(cmd, "held-out-positions", 1, 4096)
	intIn(cmd, "threads", 0, 1024)
	floatIn(cmd, "mask-clip", -1e6, -1e-9)
	floatIn(cmd, "headroom", 1, 16)
	floatIn(cmd, "promote-below", 0, 100)
	checkedBy(cmd, "headroom-tensor", "NAME=FACTOR with a factor from 1 to 64", func(v string) error {
		kv := map[string]string{}
		if v = strings.TrimSuffix(strings.TrimPrefix(v, "["), "]"); v != "" {
			for _, pair := range strings.Split(v, ",") {
				name, factor, _ := strings.Cut(pair, "=")
				kv[name] = factor
			}
		}
		_, err := parseHeadroomTensors(kv)
		return err
	}, "mlp_act=0", "mlp_act=65", "mlp_act=x", "=2", "mlp_act=NaN")
	rootCmd.AddCommand(cmd)
}

func (f *qnnBundleFlags) run(cmd *cobra.Command) error {
	if f.Model == "" || f.Export == "" || f.Out == "" {
		return usagef("--model, --export and --out are required")
	}
	// The flag rules (intIn, floatIn, oneOf) have checked every value's
	// range and word before the command runs.
	prec, err := qnn.ParsePrecision(f.precision)
	if err != nil {
		return usagef("--precision: %v", err)
	}
	if cmd.Flags().Changed("promote-below") && !prec.Promotes() {
		return usagef("--promote-below: %s has no 4-bit weights to promote (w4a16 and w4a16-lpbq have)", prec.Name)
	}
	start := time.Now()
	o := f.Options
	o.Precision, o.Log = prec, cmd.ErrOrStderr()
	o.ObserveGiven = cmd.Flags().Changed("observe")
	if o.HeadroomTensors, err = parseHeadroomTensors(f.headroomTensors); err != nil {
		return usagef("--headroom-tensor: %v", err)
	}
	if !cmd.Flags().Changed("headroom") && !cmd.Flags().Changed("headroom-tensor") {
		o.HeadroomTensors = maps.Clone(qnn.HeadroomTensors)
	}
	// Every path the bundle reads is an input --out may not overlap,
	// checked before any work: ONNX Runtime's library (--ort-lib or
	// $SPARKCONV_ORT_LIB) included.
	if lib, err := ortrun.FindORTLib(o.ORTLib); err == nil {
		o.ORTLib = lib
	}
	if err := outdir.CheckDisjoint(o.Out, append([]string{o.Model, o.Export, o.Samples, o.ORTLib}, o.HeldOutSamples...)...); err != nil {
		return err
	}
	for _, h := range o.HeldOutSamples {
		if _, err := os.Stat(h); err != nil {
			return fmt.Errorf("--held-out-samples %s: %w", h, err)
		}
		if o.Samples != "" {
			warnSameText(cmd, "--held-out-samples", h, []string{o.Samples})
		}
	}
	b, err := qnnbundle.Run(cmd.Context(), o)
	if errors.Is(err, qnnbundle.ErrRefused) {
		b.WriteSummary(cmd.ErrOrStderr(), f.Out, time.Since(start), false)
	}
	if err != nil {
		return err
	}
	if jsonOut {
		return printJSON(struct {
			*qnnbundle.Bundle
			Out     string             `json:"out"`
			Timings map[string]float64 `json:"timing"`
		}{b, f.Out, map[string]float64{"trace_s": b.Calibration.Seconds, "calibrate_s": b.Calibration.CalibrateSeconds,
			"simulate_s": b.Simulation.Seconds, "total_s": math.Round(time.Since(start).Seconds()*100) / 100}})
	}
	b.WriteSummary(cmd.OutOrStdout(), f.Out, time.Since(start), true)
	return nil
}

// parseHeadroomTensors reads --headroom-tensor's NAME=FACTOR pairs: each
// factor a number from 1 to 64 (nil when none is given).
func parseHeadroomTensors(kv map[string]string) (map[string]float64, error) {
	if len(kv) == 0 {
		return nil, nil
	}
	out := map[string]float64{}
	for name, v := range kv {
		h, err := strconv.ParseFloat(v, 64)
		if err != nil || !(h >= 1 && h <= 64) || name == "" {
			return nil, fmt.Errorf("%s=%s: want NAME=FACTOR, a factor from 1 to 64", name, v)
		}
		out[name] = h
	}
	return out, nil
}
