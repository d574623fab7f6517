package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"sparkconv/safetensors"
	"sparkconv/spark"
)

func init() {
	var model string
	var maxLen int
	cmd := &cobra.Command{
		Use:   "inspect --model DIR",
		Short: "Plan memory: config summary, layer types, parameter counts, bytes per format, KV cache and RoPE tables",
		Long: `Prints the config summary, layer types, parameter counts, checkpoint bytes
per output format, KV-cache and RoPE-table memory at --max-model-len. A folder
with weights is checked first (every tensor against config.json); a folder
holding only config.json is planned from it alone (say so on stderr, and
"weights": "absent" in --json), so a plan needs no download of the weights.`,
		Example: "  sparkconv inspect --model /tmp/spark-tiny --max-model-len 4096 --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" {
				return usagef("--model is required")
			}
			cfg, weights, err := inspectConfig(model)
			if err != nil {
				return err
			}
			fp, err := cfg.Footprint(maxLen)
			if err != nil {
				return err
			}
			if jsonOut {
				return printJSON(map[string]any{"model": model, "weights": weights, "config": cfg, "plan": fp})
			}
			if weights != "checked" {
				fmt.Fprintf(cmd.ErrOrStderr(), "sparkconv: %s has no weights (no %s or %s): planned from config.json alone\n", model, safetensors.SingleFile, safetensors.IndexFile)
			}
			printFootprint(cmd.OutOrStdout(), cfg, fp)
			return nil
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "model folder (config.json + safetensors)")
	cmd.Flags().IntVar(&maxLen, "max-model-len", 2048, "context the runtime is sized for")
	freeForm(cmd, "model")
	intIn(cmd, "max-model-len", 1, spark.MaxPositions)
	rootCmd.AddCommand(cmd)
}

// inspectConfig returns the folder's config and how its weights stood:
// "checked" when a checkpoint is present (every tensor checked against the
// config, as every command does), "absent" when the folder holds only
// config.json, which is enough to plan before downloading the weights.
func inspectConfig(dir string) (*spark.Config, string, error) {
	_, errSingle := os.Lstat(filepath.Join(dir, safetensors.SingleFile))
	_, errIndex := os.Lstat(filepath.Join(dir, safetensors.IndexFile))
	if errSingle != nil && errIndex != nil {
		cfg, err := spark.LoadConfig(dir)
		return cfg, "absent", err
	}
	m, err := spark.Open(dir)
	if err != nil {
		return nil, "", err
	}
	defer m.Close()
	return m.Config, "checked", nil
}

func mb(n int64) string { return fmt.Sprintf("%.2f MB", float64(n)/(1<<20)) }

func printFootprint(w io.Writer, c *spark.Config, p spark.Footprint) {
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
