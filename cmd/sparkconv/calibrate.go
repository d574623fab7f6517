package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"sparkconv/calib"
	"sparkconv/convert"
)

func init() {
	var model, out string
	var samples []string
	var seqLen, maxSamples, minTokens int
	var seed uint64
	var force bool
	cmd := &cobra.Command{
		Use:   "calibrate --model DIR --samples FILE --out DIR [--seq-len N] [--max-samples N] [--seed N] [--force]",
		Short: "Run real text through the fp32 forward; record linear-input statistics, Hessians and activation ranges",
		Long: `Tokenizes the samples with the model folder's tokenizer.json, cuts long samples
into chunks of --seq-len tokens (keeping every token), runs them through the
float32 reference forward layer by layer and writes into --out:
  summary.json          ranges {min,max,absmax} of every intermediate tensor per
                        layer (residual, norms, q/k/v, K cache, scores, probs,
                        gate, MLP...), the head's, the samples used, the inputs;
  layer_NN.safetensors  per linear input: per-channel absmax/min/max/mean_sq and
                        the Hessian sum X^T X (float64, stored F32) + token count;
  head.safetensors      the same for the head's input.
A samples file separates samples with lines holding only "---"; a .jsonl file
holds one {"text": ...} per line. --samples can be repeated. The per-layer
summary (layer-input and KV absmax) goes to stderr; --json prints it on stdout.`,
		Example: `  sparkconv calibrate --model /tmp/spark-tiny --samples corpus/calib.txt --out /tmp/calib`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" || out == "" || len(samples) == 0 {
				return usagef("--model, --samples and --out are required")
			}
			return runCalibrate(cmd, model, samples, out, force, seqLen, maxSamples, minTokens, seed)
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "model folder (config.json + safetensors + tokenizer.json)")
	f.StringArrayVar(&samples, "samples", nil, "samples file (text with --- separators, or .jsonl); repeatable")
	f.StringVar(&out, "out", "", "output folder (built beside it, renamed into place when complete)")
	f.IntVar(&seqLen, "seq-len", 512, "longest chunk in tokens; longer samples are cut into several chunks")
	f.IntVar(&maxSamples, "max-samples", 0, "use at most this many samples, a random subset drawn with --seed (0: all)")
	f.Uint64Var(&seed, "seed", 0, "seed of the --max-samples draw")
	f.IntVar(&minTokens, "min-tokens", 128, "fail when the samples give fewer tokens than this")
	f.BoolVar(&force, "force", false, "replace an existing output folder")
	freeForm(cmd, "model", "samples", "out")
	intIn(cmd, "seq-len", 1, 1<<20)
	intIn(cmd, "max-samples", 0, 1<<31)
	intIn(cmd, "min-tokens", 0, 1<<40)
	uintAny(cmd, "seed")
	rootCmd.AddCommand(cmd)
}

func runCalibrate(cmd *cobra.Command, modelDir string, files []string, out string, force bool, seqLen, maxSamples, minTokens int, seed uint64) error {
	start := time.Now()
	s, total, err := calib.Run(cmd.Context(), calib.Options{Model: modelDir, Files: files, Out: out, Force: force,
		SeqLen: seqLen, MaxSamples: maxSamples, MinTokens: minTokens, Seed: seed, Log: os.Stderr})
	if err != nil {
		return err
	}
	secs, rss := time.Since(start).Seconds(), convert.PeakRSSMB()
	s.WriteText(os.Stderr)
	fmt.Fprintf(os.Stderr, "wrote %s in %.1fs (%.0f tokens/s), peak RSS %.0f MB\n", out, secs, float64(total)/secs, rss)
	if jsonOut {
		return printJSON(map[string]any{"out": out, "seconds": secs, "peak_rss_mb": rss, "summary": s})
	}
	return nil
}
