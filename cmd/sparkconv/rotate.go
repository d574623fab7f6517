package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"sparkconv/dtype"
	"sparkconv/pipeline"
	"sparkconv/rotate"
)

func init() {
	var cf convertFlags
	var seed uint64
	var dt string
	var sm rotate.Smoothing
	var smooth string
	cmd := &cobra.Command{
		Use:   "rotate --model DIR --out DIR [--seed N] [--dtype same|bf16|f32] [--smooth-down ALPHA|auto]",
		Short: "Write the checkpoint with its residual stream rotated (QuaRot R1), for int8 activations and int4 weights",
		Long: `Multiplies the residual stream by an orthogonal Q, folded into the weights:
every RMSNorm's weight goes into the linears reading its output (the norms
become 1), embed_tokens becomes E·Q, q_k_v_proj, g_proj, gate_proj, up_proj
and the head W·diag(norm)·Q, o_proj and down_proj Qᵀ·W. The network is the
same in exact arithmetic; an outlier channel of the residual (an attention
sink's one-hot row) is spread over every channel, so per-token int8
activations and per-group int4 weights lose far less. The head is untied
(lm_head = E·diag(final norm)·Q, one more vocab x hidden tensor).

Q is a randomized Hadamard matrix diag(s)·H/√n (s: ±1 from --seed) when a
Hadamard matrix of the hidden size exists as Sylvester 2^a times Paley q+1
(2048 = 2^11, 576 = 8 x 72), else a seeded random orthogonal matrix.
config.json records it under sparkconv_rotation, and every build made from
the output keeps that record. Feed the output to w8a8, gptq, w4a16,
export-onnx or qnn-bundle as any checkpoint; score it with eval --base on
the original model.

--dtype same (default) writes each tensor in its input dtype (a second
bf16 rounding of every weight); f32 writes float32 (4 bytes a weight) so a
build quantizes from the exact rotated weights.`,
		Example: "  sparkconv rotate --model /tmp/spark-tiny --out /tmp/spark-tiny-rot\n  sparkconv w8a8 --model /tmp/spark-tiny-rot --out /tmp/spark-tiny-rot-w8a8",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opt, err := cf.begin(cmd, sm.Files...)
			if err != nil {
				return err
			}
			if sm.Alpha, sm.Auto, err = parseSmoothDown(smooth); err != nil {
				return usagef("--smooth-down %s: %v", smooth, err)
			}
			if err := onlyWith(cmd, sm.Alpha > 0 || sm.Auto, "--smooth-down (0 turns smoothing off)", "samples", "tokens", "seq-len"); err != nil {
				return err
			}
			o := rotate.Options{Options: opt, Seed: seed, Smooth: sm, Log: cmd.ErrOrStderr()}
			if dt != "same" {
				if o.DType, err = dtype.Parse(map[string]string{"bf16": "BF16", "f32": "F32"}[dt]); err != nil {
					return usagef("--dtype %s: %v", dt, err)
				}
			}
			res, err := pipeline.Rotate(cmd.Context(), o, cf.gate.gate())
			if err != nil {
				return err
			}
			r := res.Report
			return cf.finish(cmd, res, func() error {
				if jsonOut {
					return printJSON(r)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "rotate: wrote %s (%s); %.1fs, peak RSS %.0f MB\n", opt.Out, r.Method, r.Timing.TotalS, r.PeakRSSMB)
				return nil
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().Uint64Var(&seed, "seed", 0, "seed of the rotation's random signs (or of the random orthogonal matrix)")
	cmd.Flags().StringVar(&dt, "dtype", "same", "dtype of the written tensors: same (each input tensor's), bf16 or f32")
	f := cmd.Flags()
	f.StringVar(&smooth, "smooth-down", strconv.FormatFloat(rotate.DefaultSmoothAlpha, 'g', -1, 64), "also smooth every down_proj input with this SmoothQuant alpha in "+smoothDownRange+" (folded into up_proj and down_proj, exact); 0 turns it off; auto chooses alpha per layer by the W8A8 output error on the calibration tokens")
	f.StringArrayVar(&sm.Files, "samples", nil, "calibration samples file for --smooth-down (text with --- separators, or .jsonl); repeatable (default: the embedded corpus)")
	f.IntVar(&sm.Tokens, "tokens", rotate.DefaultSmoothTokens, "calibration tokens for --smooth-down")
	f.IntVar(&sm.SeqLen, "seq-len", 512, "longest calibration chunk in tokens")
	checkedBy(cmd, "smooth-down", "a number in "+smoothDownRange+" or auto", func(s string) error {
		_, _, err := parseSmoothDown(s)
		return err
	}, "1", "-0.1", "NaN", "inf", "", "x", "Auto", "0.995")
	freeForm(cmd, "samples")
	intIn(cmd, "tokens", 16, 1<<31)
	intIn(cmd, "seq-len", 1, 1<<20)
	uintAny(cmd, "seed")
	oneOf(cmd, "dtype", "same", "bf16", "f32")
	rootCmd.AddCommand(cmd)
}

// smoothDownRange is --smooth-down's numeric range, rotate's.
var smoothDownRange = fmt.Sprintf("[0, %g]", rotate.MaxSmoothAlpha)

// parseSmoothDown reads --smooth-down: an alpha in smoothDownRange
// (rotate.Smoothing.Check) or auto.
func parseSmoothDown(s string) (alpha float64, auto bool, err error) {
	if s == "auto" {
		return 0, true, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || (rotate.Smoothing{Alpha: v}).Check() != nil {
		return 0, false, errors.New("want a number in " + smoothDownRange + " or auto")
	}
	return v, false, nil
}
