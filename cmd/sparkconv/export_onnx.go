package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"sparkconv/onnxgraph"
	"sparkconv/pipeline"
	"sparkconv/spark"
)

// exportONNXFlags are export-onnx's flags.
type exportONNXFlags struct {
	model, out, layout, dtype, granularity, gelu, layers string
	context, prefill                                     int
	force, noLint                                        bool
}

func init() {
	var f exportONNXFlags
	cmd := &cobra.Command{
		Use:   "export-onnx --model DIR --out DIR",
		Short: "Write ONNX decode-step graphs (embed, layers or blocks, head) for QNN / AI Hub",
		Long: `Writes one decode step of the model as ONNX graphs with every KV cache an
explicit tensor (the decode-step contract of docs/formats.md#onnx-decode-step,
recorded in manifest.json):
embed.onnx, layer_NN.onnx (or block_NN.onnx with --granularity block),
head.onnx and manifest.json (shapes, layouts, rotary tables, sha256 of every
file). Opset 17, IR 8, static shapes, weights as initializers (bf16 widened to
float32 or rounded to float16); a file that would pass 2 GiB keeps its weights
in "<file>.data". Every graph is then checked by the QNN lint; an error finding
fails the export and nothing is written.

--prefill N adds per embed, layer or block graph a prefill graph taking N
tokens at once (embed_prefill.onnx, layer_NN_prefill.onnx, ...: the contract
of docs/formats.md#prefill-graphs): the runtime feeds a prompt N tokens a
step instead of one, with the same KV cache tensors. A graph and its prefill
graph keep their weights in one shared file, "<graph>.data". 0 (the
default) writes the decode step alone; 128 is the prompt length Qualcomm's
LLM exports use.

--layers exports a subset for sharding: embed.onnx comes with layer 0,
head.onnx with the last layer, so disjoint ranges write every file once.
The output folder is built beside --out and renamed into place when complete;
the bytes are identical on every run.`,
		Example: `  sparkconv export-onnx --model /tmp/spark-tiny --out /tmp/spark-tiny-onnx
  sparkconv export-onnx --model DIR --out OUT --dtype fp16 --granularity block --context 2048
  sparkconv export-onnx --model DIR --out OUT --prefill 128
  sparkconv export-onnx --model DIR --out OUT-a --layers 0-13 && sparkconv export-onnx --model DIR --out OUT-b --layers 14-27`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runExportONNX(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "input model folder (config.json + safetensors)")
	fl.StringVar(&f.out, "out", "", "output folder")
	fl.StringVar(&f.layout, "layout", "auto", "KV cache layout: ring, roll, or auto (ring for sliding layers, roll for full)")
	fl.IntVar(&f.context, "context", 1024, "context length: full layers hold context-1 cache slots")
	fl.StringVar(&f.dtype, "dtype", "fp32", "float type of every graph input, output and weight: fp32 or fp16")
	fl.StringVar(&f.granularity, "granularity", "layer", "one graph per layer, or per block of 4 layers (3 sliding + 1 full)")
	fl.StringVar(&f.gelu, "gelu", "", "erf (exact) or tanh; default follows config.json hidden_act")
	fl.StringVar(&f.layers, "layers", "all", `layers to export, e.g. "0-13" or "0-3,8-11"`)
	fl.IntVar(&f.prefill, "prefill", 0, "also write prefill graphs taking this many tokens at once (0: none; below --context)")
	fl.BoolVar(&f.force, "force", false, "replace an existing output folder")
	fl.BoolVar(&f.noLint, "no-lint", false, "skip the QNN lint")
	freeForm(cmd, "model", "out")
	oneOf(cmd, "layout", "auto", "ring", "roll")
	intIn(cmd, "context", 2, spark.MaxContext).why(spark.MaxContextWhy)
	intIn(cmd, "prefill", 0, spark.MaxContext-1)
	oneOf(cmd, "dtype", "fp32", "float32", "fp16", "float16")
	oneOf(cmd, "granularity", "layer", "block")
	oneOf(cmd, "gelu", "erf", "tanh").unset()
	checkedBy(cmd, "layers", `"all" or ranges of layer numbers such as "0-13" or "0-3,8-11"`,
		func(s string) error { _, err := onnxgraph.ParseLayers(s, spark.MaxLayers); return err },
		"x", "3-1", "-1", "0-", "1,,2", "NaN")
	rootCmd.AddCommand(cmd)
}

// exportONNXReport is export-onnx's JSON summary: the export, and the
// error that refused it.
type exportONNXReport struct {
	*pipeline.Export
	Error string `json:"error,omitempty"`
}

func (f *exportONNXFlags) options(c *spark.Config) (onnxgraph.ExportOptions, error) {
	o := onnxgraph.ExportOptions{Layout: f.layout, Context: f.context, Granularity: f.granularity, GELU: f.gelu, Prefill: f.prefill}
	if err := checkIn("prefill", int64(f.prefill), 0, int64(f.context)-1, "--context - 1"); err != nil {
		return o, err
	}
	switch f.dtype {
	case "fp32", "float32":
		o.DType = onnxgraph.Float32
	case "fp16", "float16":
		o.DType = onnxgraph.Float16
	default:
		return o, usagef("--dtype %q: want fp32 or fp16", f.dtype)
	}
	layers, err := onnxgraph.ParseLayers(f.layers, c.NumLayers)
	if err != nil {
		return o, usagef("--layers %q: %v", f.layers, err)
	}
	if c.MaxPositionEmbeddings > 0 {
		if err := checkIn("context", int64(f.context), 2, int64(c.MaxPositionEmbeddings), "config.json max_position_embeddings"); err != nil {
			return o, err
		}
	}
	o.Layers = layers
	if _, err := onnxgraph.GraphCount(c, o); err != nil {
		return o, usagef("%v", err)
	}
	return o, nil
}

func runExportONNX(cmd *cobra.Command, f *exportONNXFlags) error {
	if f.model == "" || f.out == "" {
		return usagef("--model and --out are required")
	}
	c, err := spark.LoadConfig(f.model)
	if err != nil {
		return err
	}
	o, err := f.options(c)
	if err != nil {
		return err
	}
	ex, err := pipeline.ExportONNX(cmd.Context(), f.model, f.out, f.force, o, !f.noLint)
	if errors.Is(err, pipeline.ErrLint) {
		if jsonOut {
			rep := exportONNXReport{Export: ex, Error: err.Error()}
			if perr := printJSON(rep); perr != nil {
				return perr
			}
			return reported(err)
		}
		printLint(cmd, ex)
		return err
	}
	if err != nil {
		return err
	}
	if jsonOut {
		return printJSON(exportONNXReport{Export: ex})
	}
	printLint(cmd, ex)
	man := ex.Manifest
	fmt.Fprintf(cmd.OutOrStdout(), "export-onnx: wrote %s: %d graphs, %.1f MB in %.1fs (%.0f MB/s); %s, %s, context %d, layout %s, QNN lint: %d errors, %d warnings\n",
		f.out, len(man.AllGraphs()), float64(ex.Bytes)/1e6, ex.Seconds, ex.MBPerSec, man.DType, man.Granularity, man.Context, man.Layout, ex.LintErrors, ex.LintWarnings)
	return nil
}

func printLint(cmd *cobra.Command, rep *pipeline.Export) {
	if jsonOut {
		return
	}
	for _, g := range rep.Manifest.AllGraphs() {
		for _, f := range rep.Lint[g.File] {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", g.File, f)
		}
	}
}
