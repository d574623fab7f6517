package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"sparkconv/synthetic"
)

func init() {
	var opt synthetic.Options
	var out string
	var force bool
	cmd := &cobra.Command{
		Use:   "fixture --preset tiny|small|full --out DIR",
		Short: "Generate a deterministic Spark-X2.5 checkpoint (bf16, realistic statistics, own tokenizer)",
		Example: `  sparkconv fixture --preset tiny --out /tmp/spark-tiny
  sparkconv fixture --preset full --out /tmp/spark-full --shards 2 --untied`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			shape := synthetic.Presets[opt.Preset]
			if out == "" {
				return usagef("--out is required")
			}
			tensors := 8*shape.Layers + 2 // per layer 8, plus embedding and final norm
			if opt.Untied {
				tensors++
			}
			if err := checkIn("shards", int64(opt.Shards), 1, int64(tensors), "the preset's tensor count: each shard holds at least one tensor"); err != nil {
				return err
			}
			opt.Ctx = cmd.Context()
			if err := synthetic.Run(out, force, opt, jsonOut); err != nil {
				return err
			}
			if jsonOut {
				return printJSON(map[string]any{"out": out, "preset": opt.Preset, "seed": opt.Seed, "bytes": shape.Bytes(!opt.Untied), "tied": !opt.Untied})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s preset to %s (%.1f MB of bf16 weights)\n", opt.Preset, out, float64(shape.Bytes(!opt.Untied))/1e6)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.Preset, "preset", "tiny", "model size: "+strings.Join(synthetic.PresetNames(), ", "))
	f.StringVar(&out, "out", "", "output folder")
	f.Uint64Var(&opt.Seed, "seed", 1, "random seed (same seed, same bytes)")
	f.IntVar(&opt.Shards, "shards", 1, "write this many safetensors shards plus an index")
	f.BoolVar(&opt.Untied, "untied", false, "write a separate lm_head.weight (tie_word_embeddings false)")
	f.BoolVar(&force, "force", false, "replace an existing output folder")
	oneOf(cmd, "preset", synthetic.PresetNames()...)
	freeForm(cmd, "out")
	uintAny(cmd, "seed")
	intIn(cmd, "shards", 1, 1<<16)
	rootCmd.AddCommand(cmd)
}
