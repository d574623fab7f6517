package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"sparkconv/convert"
	"sparkconv/gptq"
	"sparkconv/pipeline"
)

// convertFlags are the flags every checkpoint-writing command shares.
type convertFlags struct {
	opt       convert.Options
	shardSize string
	gate      gateFlags // --eval, --max-kld, --min-top1
}

func (c *convertFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.opt.Model, "model", "", "input model folder (config.json + safetensors)")
	f.StringVar(&c.opt.Out, "out", "", "output folder (built beside it, renamed into place when complete)")
	f.BoolVar(&c.opt.Force, "force", false, "replace an existing output folder")
	f.StringVar(&c.shardSize, "max-shard-size", "5GB", "largest safetensors shard (e.g. 2GB, 500MB, 0 for one file)")
	c.gate.register(cmd)
	freeForm(cmd, "model", "out")
	sizeIn(cmd, "max-shard-size", 1, 1e15)
}

// options validates the flags and returns the conversion options.
func (c *convertFlags) options() (convert.Options, error) {
	if c.opt.Model == "" || c.opt.Out == "" {
		return c.opt, usagef("--model and --out are required")
	}
	n, err := parseSize(c.shardSize)
	if err != nil {
		return c.opt, usagef("--max-shard-size: %v", err)
	}
	c.opt.MaxShardSize = n
	if c.gate.text != "" && c.gate.text != builtinText {
		c.opt.Inputs = []string{c.gate.text} // --eval FILE
	}
	c.opt.Quiet = jsonOut
	c.opt.Version = version
	return c.opt, nil
}

// begin validates the shared flags and the quality gate before any work
// and returns the options, with inputs (samples files) added to what --out
// must not overlap.
func (c *convertFlags) begin(cmd *cobra.Command, inputs ...string) (convert.Options, error) {
	opt, err := c.options()
	if err != nil {
		return opt, err
	}
	if err := c.gate.check(cmd, opt.Model); err != nil {
		return opt, err
	}
	if c.gate.text != builtinText {
		warnSameText(cmd, "--eval", c.gate.text, inputs)
	}
	opt.Inputs = append(opt.Inputs, inputs...)
	return opt, nil
}

// parseSize reads a byte count with an optional decimal (KB, MB, GB) or
// binary (KiB, MiB, GiB) unit, as transformers' max_shard_size does.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, x := range units {
		if strings.HasSuffix(u, x.suffix) {
			u, mult = strings.TrimSpace(strings.TrimSuffix(u, x.suffix)), x.mult
			break
		}
	}
	v, err := strconv.ParseFloat(u, 64)
	n := v * float64(mult)
	if err != nil || !(n >= 0 && n < math.MaxInt64) || n != math.Trunc(n) {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	return int64(n), nil
}

// printReport prints a conversion summary (or the JSON report).
func printReport(cmd *cobra.Command, r *convert.Report, out string) error {
	if jsonOut {
		return printJSON(r)
	}
	t := r.Totals
	fmt.Fprintf(cmd.OutOrStdout(), "%s: wrote %s (%d quantized, %d copied tensors); weight SNR min %.2f / mean %.2f / max %.2f dB, max abs err %.3g; %.1fs, peak RSS %.0f MB\n",
		r.Scheme, out, t.Quantized, t.Copied, t.MinSNRdB, t.MeanSNRdB, t.MaxSNRdB, t.MaxErr, r.Timing.TotalS, r.PeakRSSMB)
	return nil
}

// calibHelp ends the long help of the calibrated commands.
const calibHelp = `

Calibration (default): real GPTQ. The model runs layer by layer on --tokens
calibration tokens (default 32768 for gptq and w4a16, 8192 for w8a8, or the
whole text when it is shorter; from the corpus built into the binary, or
--samples FILE, repeatable, in calibrate's formats); each layer's input comes
from the already-quantized layers before it, and inside a layer each linear
is solved on the output of the quantized ones before it (true sequential:
q_k_v_proj, o_proj, gate_proj and up_proj, down_proj). With --float-target A
(default 0.33 for gptq, 0.25 for w4a16, 0 for w8a8) the float model runs
beside the quantized one and each layer linear is solved toward
W + A W C H^-1, the weights that map the quantized model's input onto the
float model's output (GPTAQ's asymmetric calibration). One Hessian per
distinct linear input, --damp of its mean diagonal added (default 0.01; more
when it is not positive definite); the blocked GPTQ solve picks the codes,
group parameters taken at each group boundary from the error-updated
weights; with --act-order (the default of gptq and w4a16, off for w8a8;
--act-order=false turns it off) columns go in descending Hessian-diagonal
order, groups fitted up front and kept in place. A module whose GPTQ
output error on held-out tokens is above round to nearest's is solved again
at damping 1, then 0.1; if it still loses, or its Hessian never factors, it
is rounded to nearest instead, named on stderr, in the report and the
config.
--rtn skips calibration (round to nearest only).`

// runCalibrated is the body of gptq, w4a16 and w8a8: the shared prologue
// (begin), the solver the calibration flags select, the kept set (keep:
// nil for a format without one), the build (pipeline.Convert: keep-float,
// convert, the gate), then finish's print of the report and the output
// folder.
func (c *convertFlags) runCalibrated(cmd *cobra.Command, k *calibFlags, f convert.Format, keep *keepFlags, print func(r *convert.Report, out string) error) error {
	opt, err := c.begin(cmd, k.c.Files...)
	if err != nil {
		return err
	}
	solver, err := k.solver(cmd)
	if err != nil {
		return err
	}
	var kr pipeline.Keep
	if keep != nil {
		if kr, err = keep.request(cmd, opt.Model, k.c.Files); err != nil {
			return err
		}
	}
	res, err := pipeline.Convert(cmd.Context(), opt, f, solver, kr, c.gate.gate())
	if err != nil {
		return err
	}
	return c.finish(cmd, res, func() error { return print(res.Report, opt.Out) })
}

// calibFlags are the calibration flags of gptq, w4a16 and w8a8.
type calibFlags struct {
	c   gptq.Calibrator
	rtn bool
}

// register adds the flags; fourBit says the grid is 4-bit, where
// --act-order and --refit default on; floatTarget is --float-target's
// default (the grids differ: gptq.DefaultFloatTarget,
// gptq.DefaultFloatTargetSym4, gptq.DefaultFloatTargetUInt4, 0 for int8). On
// the real model, with the plain
// group search, act-order lowers W4A16's mean KLD from 0.124 to 0.077 and
// W4A8's from 0.243 to 0.172; with the weighted search and the refit,
// W4A16's from 0.0707 to 0.0657 (docs/calibration.md#act-order). The
// refit takes W4A16 from 0.0705 to 0.0657 and leaves int8 where it was
// or a little worse (w8a8: 0.0267 without, 0.0273 with), so w8a8 runs
// without it unless asked (docs/calibration.md#weighted-search-and-refit).
func (c *calibFlags) register(cmd *cobra.Command, fourBit bool, floatTarget float64) {
	f := cmd.Flags()
	f.StringArrayVar(&c.c.Files, "samples", nil, "calibration samples file (text with --- separators, or .jsonl); repeatable (default: the embedded corpus)")
	budget := gptq.DefaultBudget
	if fourBit {
		budget = gptq.DefaultBudget4
	}
	f.IntVar(&c.c.Budget, "tokens", budget, "calibration token budget: tokens run through the model, drawn round-robin over the samples (the whole text when it is shorter; a warning says so only when --tokens is given)")
	f.IntVar(&c.c.SeqLen, "seq-len", gptq.DefaultSeqLen, "longest calibration chunk in tokens; longer samples are cut into several chunks")
	f.Float64Var(&c.c.Damp, "damp", gptq.DefaultDamp, "GPTQ damping, a fraction of the Hessian's mean diagonal, in (0, 1]")
	f.BoolVar(&c.c.ActOrder, "act-order", fourBit, "static act-order: solve columns in descending Hessian diagonal order, groups kept in place (g_idx stays k/g); --act-order=false solves them in order")
	f.BoolVar(&c.rtn, "rtn", false, "round to nearest without calibration")
	refit := 0
	if fourBit {
		refit = gptq.DefaultRefit
	}
	f.IntVar(&c.c.Refit, "refit", refit, "sweeps of the least-squares refit of each solved linear's group parameters to its codes under the calibration Hessian (0: none)")
	rounds := 1
	if fourBit {
		rounds = gptq.DefaultRefitRounds4
	}
	f.IntVar(&c.c.Rounds, "refit-rounds", rounds, "with --refit: times the codes are solved, each after the first for the refitted parameters (the lower loss is kept)")
	f.Float64Var(&c.c.FloatTarget, "float-target", floatTarget, "asymmetric calibration (GPTAQ's objective): run the float model beside the quantized one and solve each layer linear toward W + A W C H^-1, the weights that map the quantized model's input onto the float model's output; A in [0, 1] is that target's weight (0: off)")
	freeForm(cmd, "samples")
	checkedBy(cmd, "float-target", "a weight in [0, 1]", func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return fmt.Errorf("%q is not in [0, 1]", s)
		}
		return nil
	}, "-0.1", "1.5", "NaN", "inf", "", "x")
	intIn(cmd, "refit", 0, 20)
	intIn(cmd, "refit-rounds", 1, 10)
	intIn(cmd, "tokens", gptq.MinTokens, 1<<31)
	intIn(cmd, "seq-len", 1, 1<<20)
	checkedBy(cmd, "damp", "a fraction in (0, 1] of the mean Hessian diagonal", func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0 && v <= 1) {
			return fmt.Errorf("%q is not in (0, 1]", s)
		}
		return nil
	}, "0", "-0.01", "1.5", "NaN", "inf", "", "x")
}

// registerWeighted adds the 4-bit formats' --weighted-search.
func (c *calibFlags) registerWeighted(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&c.c.Weighted, "weighted-search", true, "weigh each group's parameter search by its input channels' activation energy on the calibration text (llama.cpp's imatrix); false: the plain squared weight error")
}

// registerSmooth adds w8a8's --smooth.
func (c *calibFlags) registerSmooth(cmd *cobra.Command) {
	cmd.Flags().Float64Var(&c.c.Smooth, "smooth", 0, "SmoothQuant strength alpha in (0, 1) (llm-compressor uses 0.8): fold per-channel scales into the norms before GPTQ; 0: off")
	checkedBy(cmd, "smooth", "SmoothQuant's alpha in (0, 1), or 0 for off", func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v == 0 || v > 0 && v < 1) {
			return fmt.Errorf("%q is not 0 or in (0, 1)", s)
		}
		return nil
	}, "1", "1.5", "-0.2", "NaN", "inf", "", "x")
}

// solver validates the calibration flags and returns the solver (nil with
// --rtn).
func (c *calibFlags) solver(cmd *cobra.Command) (convert.Solver, error) {
	f := cmd.Flags()
	if c.rtn {
		for _, name := range []string{"samples", "tokens", "seq-len", "damp", "act-order", "smooth", "refit", "refit-rounds", "weighted-search", "float-target"} {
			if f.Lookup(name) != nil && f.Changed(name) {
				return nil, usagef("--%s calibrates; it cannot be combined with --rtn", name)
			}
		}
		return nil, nil
	}
	if c.c.FloatTarget > 0 && c.c.Smooth > 0 {
		return nil, usagef("%s", gptq.FloatTargetWithSmooth)
	}
	if f.Changed("refit-rounds") && c.c.Refit == 0 {
		return nil, usagef("--refit-rounds solves again for refitted parameters; it needs --refit above 0")
	}
	if f.Lookup("weighted-search") != nil && f.Changed("weighted-search") && c.c.Weighted && f.Lookup("no-search") != nil {
		if ns, _ := f.GetBool("no-search"); ns {
			return nil, usagef("--weighted-search weighs the parameter search, which --no-search turns off")
		}
	}
	c.c.QuietShortText = !f.Changed("tokens")
	// The flag rules (intIn, checkedBy) have checked --damp, --tokens,
	// --smooth and --seq-len before the command runs.
	c.c.Log = cmd.ErrOrStderr()
	c.c.Quiet = jsonOut
	return &c.c, nil
}
