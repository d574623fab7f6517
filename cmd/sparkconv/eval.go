package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"sparkconv/eval"
	"sparkconv/eval/evalort"
	"sparkconv/ortrun"
	"sparkconv/outdir"
	"sparkconv/spark"
)

// evalFlags are the flags of eval (and of the builds' --eval).
type evalFlags struct {
	base, model, samples, ids, baseLogits, report string
	export, ortLib                                string
	threads                                       int
	opt                                           eval.Settings
	force                                         bool
}

func (e *evalFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&e.base, "base", "", "the original model folder (config.json + safetensors + tokenizer.json)")
	f.StringVar(&e.model, "model", "", "the build to score: any checkpoint or sparkconv output folder")
	f.StringVar(&e.samples, "samples", "", "held-out text (samples separated by --- lines, or .jsonl); default: the built-in held-out text")
	f.StringVar(&e.ids, "ids", "", "file of whitespace-separated token ids, taken as they are (no BOS added)")
	f.IntVar(&e.opt.Ctx, "ctx", 512, "window length in tokens; positions ctx/2 .. ctx-2 of each window are scored")
	f.IntVar(&e.opt.Prompts, "greedy", 8, "greedy test: how many prompts (one per sample), 0 to skip it")
	f.IntVar(&e.opt.GenTokens, "gen-tokens", 32, "greedy test: tokens generated per prompt")
	f.StringVar(&e.baseLogits, "base-logits", "", "keep the base's log-probs in this file: computed when absent, reused when present")
	f.StringVar(&e.report, "report", "", "write a self-contained HTML report to this file")
	f.BoolVar(&e.force, "force", false, "replace an existing --report file, recompute an existing --base-logits file")
	f.StringVar(&e.export, "export", "", "score an export-onnx folder in ONNX Runtime instead of --model (token by token, as a phone runtime runs it)")
	f.StringVar(&e.ortLib, "ort-lib", "", "with --export: path of libonnxruntime.so (default: $SPARKCONV_ORT_LIB, then .ort/ in the repository)")
	f.IntVar(&e.threads, "threads", 1, "with --export: ONNX Runtime intra-op threads (0: its default); one decode step is small, so 1 is fastest on small models")
	freeForm(cmd, "base", "model", "samples", "ids", "base-logits", "report", "export", "ort-lib")
	intIn(cmd, "threads", 0, 1024)
	intIn(cmd, "ctx", 4, spark.MaxContext).why(spark.MaxContextWhy)
	intIn(cmd, "greedy", 0, 1<<16)
	intIn(cmd, "gen-tokens", 1, 1<<20)
}

// check validates the flags (usage errors).
func (e *evalFlags) check(needModel bool) error {
	switch {
	case e.base == "":
		return usagef("--base is required")
	case needModel && (e.model == "") == (e.export == ""):
		return usagef("give exactly one of --model and --export")
	case e.samples != "" && e.ids != "":
		return usagef("give at most one of --samples and --ids")
	}
	e.opt.Force = e.force
	return nil
}

func init() {
	var ef evalFlags
	cmd := &cobra.Command{
		Use:   "eval --base ORIG (--model BUILD | --export DIR) [--samples FILE | --ids FILE] [--ctx 512] [--base-logits FILE] [--report FILE.html]",
		Short: "Measure a build's fidelity to the original on held-out text: KL divergence, same top-1, perplexity, greedy reproduction",
		Long: `Scores a build against the original as llama.cpp's llama-perplexity
--kl-divergence does: the text's token stream is cut into windows of --ctx
tokens (a last partial window is dropped), and in each window the positions
ctx/2 .. ctx-2 are scored against the next token: KL divergence of the build's
next-token distribution from the original's (mean with its standard error,
median, 90/99/99.9 % and max), how often the most likely token is the same,
both perplexities and their ratio, mean ln(PPL ratio) with its uncertainty,
and the change in the true token's probability (mean and RMS). Then the greedy
test: the first tokens of each sample are a prompt, the original continues it
greedily by --gen-tokens tokens, and the build's continuation is compared.

The build may be any checkpoint or sparkconv output (W8A8, GPTQ W4A8, W4A16):
the forward dequantizes it and quantizes the activations as the runtime does.
The original's log-probs are computed once and kept with --base-logits, so
scoring several builds runs the original once (a file made for other text,
--ctx or greedy settings is refused). --export scores an export-onnx folder
instead, driven in ONNX Runtime token by token as a phone runtime runs it
(embed, every layer graph with its ring/roll caches, masks and rope inputs,
head; each window from empty caches), graph by graph: one session is open at
a time and runs every position of every window before the next one opens,
so memory holds one graph's weights, not the whole export. Without --samples or --ids the held-out
text built into sparkconv is used (English, code, Chinese and tool calls,
disjoint from the calibration corpus).`,
		Example: `  sparkconv eval --base /tmp/spark-tiny --model /tmp/spark-tiny-w8a8
  sparkconv eval --base /tmp/spark --model /tmp/spark-w4a16 --base-logits /tmp/base.st --report /tmp/w4a16.html --json
  sparkconv eval --base /tmp/spark-tiny --export /tmp/spark-tiny-onnx --ctx 256`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ef.check(true); err != nil {
				return err
			}
			if err := onlyWith(cmd, ef.export != "", "--export", "ort-lib", "threads"); err != nil {
				return err
			}
			r, err := runEval(cmd.Context(), &ef)
			if err != nil {
				return err
			}
			if jsonOut {
				return printJSON(r)
			}
			printEval(cmd.OutOrStdout(), r)
			return nil
		},
	}
	ef.register(cmd)
	rootCmd.AddCommand(cmd)
}

// runEval scores ef.model (or ef.export) against ef.base; a cancelled ctx
// stops it.
func runEval(ctx context.Context, ef *evalFlags) (*eval.Result, error) {
	ef.opt.Context = ctx
	inputs := []string{ef.base, ef.model, ef.export, ef.samples, ef.ids}
	if ef.export != "" { // ONNX Runtime's library is read too
		if lib, err := ortrun.FindORTLib(ef.ortLib); err == nil {
			inputs = append(inputs, lib)
		}
	}
	if err := checkEvalOutputs(ef, inputs); err != nil {
		return nil, err
	}
	if err := checkExportContext(ef); err != nil {
		return nil, err
	}
	j := eval.Options{Base: ef.base, Build: ef.model + ef.export, Samples: ef.samples, IDs: ef.ids,
		BaseLogits: ef.baseLogits, Report: ef.report, Settings: ef.opt}
	if ef.export != "" {
		j.OpenBuild = func() (eval.Model, func(), error) {
			e, err := evalort.Open(ef.export, ef.threads, "")
			if err != nil {
				return nil, nil, err
			}
			return e, e.Close, nil
		}
	}
	return eval.Run(j, inputs...)
}

// checkEvalOutputs refuses, before any work, a --report or --base-logits
// that is or lies inside an input (or is the other one), and a --report
// that --force may not replace.
func checkEvalOutputs(ef *evalFlags, inputs []string) error {
	if ef.baseLogits != "" {
		if err := outdir.CheckDisjoint(ef.baseLogits, append(inputs, ef.report)...); err != nil {
			return usageError{fmt.Errorf("--base-logits: %w", err)}
		}
	}
	if ef.report != "" { // written after the work
		if _, err := outdir.NewFile(ef.report, ef.force, eval.ReportOwner, append(inputs, ef.baseLogits)...); err != nil {
			if errors.Is(err, outdir.ErrOverlap) {
				return usageError{fmt.Errorf("--report: %w", err)}
			}
			return fmt.Errorf("--report: %w", err)
		}
	}
	return nil
}

// checkExportContext refuses an export whose caches are too short for the
// windows and the greedy test, and loads ONNX Runtime, before anything is
// computed.
func checkExportContext(ef *evalFlags) error {
	if ef.export == "" {
		return nil
	}
	return evalort.Prepare(ef.export, ef.ortLib, ef.opt.Ctx, 32+ef.opt.GenTokens-1)
}

// printEval prints the figures as llama.cpp's summary does.
func printEval(w io.Writer, r *eval.Result) {
	fmt.Fprintf(w, "%s vs %s\n%s: %d windows of %d tokens, %d tokens scored; %.1f s (%.0f tokens/s through the build)\n",
		r.Model, r.Base, r.Text, r.Window, r.Ctx, r.TokensScored, r.Seconds, r.TokensPerS)
	fmt.Fprintf(w, "  Mean PPL(Q)                : %10.4f\n", r.PPL)
	fmt.Fprintf(w, "  Mean PPL(base)             : %10.4f\n", r.PPLBase)
	fmt.Fprintf(w, "  PPL ratio                  : %10.6f\n", r.PPLRatio)
	fmt.Fprintf(w, "  Mean ln(PPL(Q)/PPL(base))  : %10.6f ± %.6f\n", r.LnPPLRatio.Mean, r.LnPPLRatio.Stderr)
	fmt.Fprintf(w, "  Mean KLD                   : %10.6f ± %.6f\n", r.KLD.Mean, r.KLD.Stderr)
	fmt.Fprintf(w, "  KLD median / 90%% / 99%% / 99.9%% / max: %.6f / %.6f / %.6f / %.6f / %.6f\n", r.KLD.Median, r.KLD.P90, r.KLD.P99, r.KLD.P999, r.KLD.Max)
	fmt.Fprintf(w, "  Same top-1                 : %9.3f %% ± %.3f %%\n", 100*r.SameTop1, 100*r.SameTop1Err)
	fmt.Fprintf(w, "  Mean Δp / RMS Δp           : %9.3f %% / %.3f %%\n", 100*r.DeltaP.Mean, 100*r.DeltaP.RMS)
	if ww := r.WorstWindow; r.Window > 1 {
		fmt.Fprintf(w, "  Worst window (of %d)        : #%d, mean KLD %.6f, same top-1 %.1f %%\n", r.Window, ww.Window, ww.KLD, 100*ww.SameTop1)
	}
	if ws := r.WorstSample; ws != nil && len(r.BySample) > 1 {
		fmt.Fprintf(w, "  Worst sample (of %d)        : #%d %q, mean KLD %.6f over %d tokens, same top-1 %.1f %%\n", len(r.BySample), ws.Sample, ws.Head, ws.KLD, ws.Tokens, 100*ws.SameTop1)
	}
	if g := r.Greedy; g.Prompts > 0 {
		fmt.Fprintf(w, "  Greedy, %d tokens           : %d/%d reproduced exactly, %.1f %% of the prefix kept\n", g.Tokens, g.Exact, g.Prompts, 100*g.PrefixKept)
	}
}
