package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"sparkconv/spark"
)

func init() {
	var model string
	var maxLen int
	cmd := &cobra.Command{
		Use:     "inspect --model DIR",
		Short:   "Plan memory: config summary, layer types, parameter counts, bytes per format, KV cache and RoPE tables",
		Example: "  sparkconv inspect --model /tmp/spark-tiny --max-model-len 4096 --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" {
				return usagef("--model is required")
			}
			if maxLen < 1 {
				return usagef("--max-model-len must be >= 1")
			}
			m, err := spark.Open(model)
			if err != nil {
				return err
			}
			defer m.Close()
			plan := m.Config.NewPlan(maxLen)
			if jsonOut {
				return printJSON(map[string]any{"model": model, "config": m.Config, "plan": plan})
			}
			printPlan(cmd.OutOrStdout(), m.Config, plan)
			return nil
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "model folder (config.json + safetensors)")
	cmd.Flags().IntVar(&maxLen, "max-model-len", 2048, "context the runtime is sized for")
	rootCmd.AddCommand(cmd)
}

func mb(n int64) string { return fmt.Sprintf("%.2f MB", float64(n)/(1<<20)) }

func printPlan(w io.Writer, c *spark.Config, p spark.Plan) {
	fmt.Fprintf(w, "Spark-X2.5: %s\n", c.Summary())
	fmt.Fprintf(w, "  intermediate %d, GELU %s, rms_norm_eps %g, tied head %v\n", c.IntermediateSize, c.HiddenAct, c.RMSNormEps, c.TieWordEmbeddings)
	fmt.Fprintf(w, "  sliding window %d; RoPE sliding R=%d theta=%g, full R=%d theta=%g (%s spelling)\n",
		c.SlidingWindow, int(float64(c.HeadDim)*c.SlidingRoPE.PartialRotaryFactor), c.SlidingRoPE.Theta,
		int(float64(c.HeadDim)*c.FullRoPE.PartialRotaryFactor), c.FullRoPE.Theta, c.RoPESpelling)
	derived := ""
	if c.LayerTypesDerived {
		derived = " (derived: layer_types absent)"
	}
	fmt.Fprintf(w, "layer types %s%s: full layers %v\n", p.LayerTypeMap, derived, p.Layers[string(spark.Full)])
	pc := p.Params
	fmt.Fprintf(w, "parameters %d (%.3f B): embedding %d, head %d, %d quantizable linears %d, g_proj %d, norms %d\n",
		pc.Total, float64(pc.Total)/1e9, pc.Embedding, pc.Head, pc.QuantizedCount, pc.QuantLinears, pc.Gate, pc.Norms)
	fmt.Fprintln(w, "checkpoint bytes (4-bit at group 128):")
	for _, f := range p.Formats {
		fmt.Fprintf(w, "  %-6s head %-10s %s\n", f.Format, f.Head, mb(f.Bytes))
	}
	kv := p.KVCache
	fmt.Fprintf(w, "KV cache (bf16): %d bytes/token; at %d tokens flat %s, hybrid %s (sliding layers capped at %d)\n",
		kv.BytesPerTokenFlat, kv.Context, mb(kv.FlatBytes), mb(kv.HybridBytes), kv.SlidingCap)
	r := p.RoPETables
	fmt.Fprintf(w, "RoPE tables (cos+sin, bf16): %s by max_position_embeddings=%d vs %s by max_model_len=%d\n",
		mb(r.BytesByMaxPosition), r.MaxPositions, mb(r.BytesByModelLen), r.MaxModelLen)
}
