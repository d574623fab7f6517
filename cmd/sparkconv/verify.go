package main

import (
	"fmt"
	"math"
	"time"

	"github.com/spf13/cobra"

	"sparkconv/verify"
)

func init() {
	var model, ortLib, optimize, prompts string
	var exports []string
	var steps, threads int
	var seed uint64
	cmd := &cobra.Command{
		Use:   "verify --model DIR --export DIR",
		Short: "Run an ONNX export in ONNX Runtime against the fp32 reference forward",
		Long: `Runs every graph of an export-onnx folder in ONNX Runtime, step by step over a
random token history long enough to wrap every sliding window, and compares
each graph with the float32 reference forward on the same inputs (the
reference's hidden state and caches; never-written cache slots hold large
random garbage that the attention mask must hide). Reports per graph the
lowest SNR over its outputs and the largest absolute error, the head's top-1
and top-5 agreement, and the logits when ONNX Runtime runs the whole chain on
its own outputs.

An export with prefill graphs (export-onnx --prefill N) is also driven
prompt by prompt (--prompts; default 1, N-1, N+1 and 2N+300 tokens, at most
the context less 4) through the prefill graphs in chunks of N, the last one
padded, and then 4 decode steps on the caches the prefill left, each graph
compared with the reference at every position on the reference's inputs;
the head's logits from the prompt's last token on are compared too, and,
reported only, when ONNX Runtime runs the whole way on its own outputs.

Bars: >= 100 dB per graph output for float32 exports, >= 55 dB for float16,
identical top-1 and top-5 (as a set) at every step, and roll graphs' present_*
exactly the input shifted by one. Exit status 1 when a bar fails.

ONNX Runtime is loaded from --ort-lib, else $SPARKCONV_ORT_LIB, else
.ort/libonnxruntime.so in the repository (scripts/install-ort.sh).

Before anything runs, every file's sha256 is checked against the manifest
and the manifest's source fingerprint (config.json, tensor headers and
sampled bytes of the checkpoint it was exported from) against --model:
either mismatch is an error naming the file or the checkpoint, not a failed
bar. Ctrl-C stops it between steps (exit 130, no verdict printed).`,
		Example: `  sparkconv verify --model /tmp/spark-tiny --export /tmp/spark-tiny-onnx
  sparkconv verify --model DIR --export onnx-0-13 --export onnx-14-27
  sparkconv verify --model DIR --export OUT --steps 600 --json
  sparkconv verify --model DIR --export OUT-with-prefill --prompts 1,127,129,556`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" || len(exports) == 0 {
				return usagef("--model and --export are required")
			}
			o := verify.Options{Steps: steps, Seed: seed, Threads: threads, Optimize: optimize}
			if prompts != "" {
				var err error
				if o.Prompts, err = verify.ParsePrompts(prompts); err != nil {
					return usagef("--prompts %q: %v", prompts, err)
				}
			}
			return runVerify(cmd, model, exports, ortLib, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "the model folder the export was made from")
	f.StringArrayVar(&exports, "export", nil, "the export-onnx output folder; repeat it for the folders of a --layers matrix, verified as one export")
	f.StringVar(&ortLib, "ort-lib", "", "path of libonnxruntime.so (default: $SPARKCONV_ORT_LIB, then .ort/ in the repository)")
	f.IntVar(&steps, "steps", 0, "decode steps (default sliding_window + 8, so every ring wraps)")
	f.IntVar(&threads, "threads", 0, "ONNX Runtime intra-op threads (0: its default)")
	f.Uint64Var(&seed, "seed", 1, "seed of the token history and the cache garbage")
	f.StringVar(&optimize, "ort-opt", "", "ONNX Runtime graph optimization: all, extended, basic, none (default: all for fp32, extended for fp16)")
	f.StringVar(&prompts, "prompts", "", "prompt lengths driven through the prefill graphs, e.g. 1,127,129,556 (default 1, N-1, N+1, 2N+300)")
	freeForm(cmd, "model", "export", "ort-lib")
	intIn(cmd, "steps", 1, 1<<20).unset() // not given: sliding_window + 8
	intIn(cmd, "threads", 0, 1024)        // 0: ONNX Runtime's default
	uintAny(cmd, "seed")
	oneOf(cmd, "ort-opt", "all", "extended", "basic", "none").unset()
	checkedBy(cmd, "prompts", "prompt lengths (positive integers) separated by commas, such as 1,127,129,556",
		func(s string) error { _, err := verify.ParsePrompts(s); return err }, "0", "-1", "x", "1,,2", "1.5").unset()
	rootCmd.AddCommand(cmd)
}

func runVerify(cmd *cobra.Command, model string, exports []string, ortLib string, o verify.Options) error {
	start := time.Now()
	rep, err := verify.Run(cmd.Context(), model, exports, ortLib, o)
	if err != nil {
		return err
	}
	if err := printJSONOr(rep, func() { printVerify(cmd, rep, time.Since(start)) }); err != nil {
		return err
	}
	if !rep.Pass {
		return reported(fmt.Errorf("verify: %d bars failed", len(rep.Failures)))
	}
	return nil
}

func printVerify(cmd *cobra.Command, rep *verify.Report, took time.Duration) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "verify %s (%s, ONNX Runtime %s, optimization %s): %d steps, bar %.0f dB\n", rep.Export, rep.DType, rep.ORTVersion, rep.ORTOptimize, rep.Steps, rep.BarDB)
	for _, g := range rep.Graphs {
		mark := "ok"
		if !g.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %-22s %-6s %8s dB  max|err| %.3g  %s\n", g.File, g.Kind, fmtDB(float64(g.SNR)), g.MaxAbs, mark)
	}
	fmt.Fprintf(w, "  head top-1 %d/%d, top-5 %d/%d; chained logits %s dB; roll shift errors %d\n",
		rep.Top1Agree, rep.Steps, rep.Top5Agree, rep.Steps, fmtDB(float64(rep.Chain.SNR)), rep.ShiftErrors)
	if p := rep.Prefill; p != nil {
		for _, pr := range p.Prompts {
			mark := "ok"
			if !pr.Pass {
				mark = "FAIL"
			}
			fmt.Fprintf(w, "  prompt %5d tokens: %3d prefill chunks of %d + %d decode steps: %s dB (lowest: %s), head top-1 %d/%d; chained logits %s dB, top-1 %d/%d  %s\n",
				pr.Tokens, pr.Chunks, p.Tokens, p.Decode, fmtDB(float64(pr.SNR)), pr.Worst, pr.Top1, pr.Positions, fmtDB(float64(pr.Chain.SNR)), pr.ChainTop1, pr.Positions, mark)
		}
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "  FAIL: %s\n", f)
	}
	result := "PASS"
	if !rep.Pass {
		result = "FAIL"
	}
	fmt.Fprintf(w, "%s (%.1fs)\n", result, took.Seconds())
}

func fmtDB(v float64) string {
	if math.IsInf(v, 1) {
		return "inf"
	}
	return fmt.Sprintf("%.1f", v)
}
