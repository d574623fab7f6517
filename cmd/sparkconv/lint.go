package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"sparkconv/onnxio"
	"sparkconv/qnn"
)

func init() {
	var encodings string
	cmd := &cobra.Command{
		Use:   "lint FILE.onnx [--encodings FILE]",
		Short: "Check an ONNX graph against what Qualcomm QNN HTP (QAIRT converter, ORT QNN EP) takes",
		Long: `Reports every construct of FILE.onnx that QNN HTP rejects or handles badly
(shared/spec/qnn.md section 3): ops without a converter translation, Erf outside
the exact-GELU pattern, RMSNorm that is not Pow -> ReduceMean(last axis) -> Add(eps)
-> Sqrt -> Div -> Mul(weight), Softmax off the last axis, IsNaN/Where guards,
Reshape allowzero=1, rank-0 axes, dynamic shapes, boolean masks, explicit
max/exp/sum/div softmax, broadcast Mul+ReduceSum, MatMul with mismatched batch
dims, ir_version above 11, opset above 23.
Each finding names its rule, the node and how to fix it. The exit status is 1
when any finding is an error (warnings alone exit 0); --json prints
{file, errors, warnings, findings[]} on stdout.

With --encodings FILE (an AIMET 1.0.0 encodings file, as qnn-bundle writes) it
also lints the pair: every encoding names a tensor of the graph (a misnamed
one is silently re-quantized by QNN), KV inputs and Concat inputs share their
outputs' grids, bit widths and symmetry are legal for HTP, and no encoding
sits inside a fusable RMSNorm or GELU pattern.`,
		Example: `  sparkconv lint out/layer_00.onnx
  sparkconv lint model.onnx --json | jq '.findings[] | select(.severity=="error")'
  sparkconv lint qnn/layer_00.aimet/layer_00.onnx --encodings qnn/layer_00.aimet/layer_00.encodings`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("lint takes one FILE.onnx, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runLint(cmd, args[0], encodings) },
	}
	cmd.Flags().StringVar(&encodings, "encodings", "", "also lint this AIMET encodings file against the graph")
	freeForm(cmd, "encodings")
	rootCmd.AddCommand(cmd)
}

// lintReport is lint's JSON output.
type lintReport struct {
	File      string        `json:"file"`
	Encodings string        `json:"encodings,omitempty"`
	Errors    int           `json:"errors"`
	Warnings  int           `json:"warnings"`
	Findings  []qnn.Finding `json:"findings"`
}

func runLint(cmd *cobra.Command, path, encodings string) error {
	m, err := onnxio.ReadModelFile(path)
	if err != nil {
		return err
	}
	rep := lintReport{File: path, Findings: qnn.Lint(m)}
	if encodings != "" {
		enc, err := qnn.ReadEncodings(encodings)
		if err != nil {
			return err
		}
		rep.Encodings = encodings
		rep.Findings = append(rep.Findings, qnn.LintEncodings(m, enc)...)
	}
	if rep.Findings == nil {
		rep.Findings = []qnn.Finding{}
	}
	rep.Errors, rep.Warnings = qnn.Count(rep.Findings)
	if jsonOut {
		if err := printJSON(rep); err != nil {
			return err
		}
	} else {
		out := cmd.OutOrStdout()
		for _, f := range rep.Findings {
			fmt.Fprintln(out, f)
		}
		fmt.Fprintf(out, "%s: %d errors, %d warnings (%d nodes)\n", path, rep.Errors, rep.Warnings, len(m.GetGraph().GetNode()))
	}
	if rep.Errors > 0 {
		return reported(fmt.Errorf("%s: %d QNN lint errors", path, rep.Errors))
	}
	return nil
}
