package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"sparkconv/qnn"
)

func init() {
	var encodings string
	cmd := &cobra.Command{
		Use:   "lint FILE.onnx|DIR... [--encodings FILE]",
		Short: "Check an ONNX graph against what Qualcomm QNN HTP (QAIRT converter, ORT QNN EP) takes",
		Long: `Reports every construct of FILE.onnx that QNN HTP rejects or handles badly
(docs/qnn.md#what-htps-converter-accepts): ops without a converter translation, Erf outside
the exact-GELU pattern, RMSNorm that is not Pow -> ReduceMean(last axis) -> Add(eps)
-> Sqrt -> Div -> Mul(weight), Softmax off the last axis, IsNaN/Where guards,
Reshape allowzero=1, rank-0 axes, dynamic shapes, boolean masks, explicit
max/exp/sum/div softmax, broadcast Mul+ReduceSum, MatMul with mismatched batch
dims, ir_version above 11, opset above 23, and a graph whose weights pass
2 GiB (HTP's limit per context binary; counted from each initializer's dtype
and dims, external data included, docs/qnn.md#htps-weight-limit).
Each finding names its rule, the node and how to fix it. The exit status is 1
when any finding is an error (warnings alone exit 0); --json prints
{file, errors, warnings, findings[]} on stdout.

Several files, or a folder (every .onnx below it, e.g. an export-onnx
folder), are linted one after the other; --json then prints {files: [one
report per file], errors, warnings}, and the exit status is 1 when any file
has an error.

With --encodings FILE (an AIMET 1.0.0 encodings file, as qnn-bundle writes) it
also lints the pair: every encoding names a tensor of the graph (a misnamed
one is silently re-quantized by QNN), KV inputs and Concat inputs share their
outputs' grids, bit widths and symmetry are legal for HTP, and no encoding
sits inside a fusable RMSNorm or GELU pattern.`,
		Example: `  sparkconv lint out/layer_00.onnx
  sparkconv lint /tmp/spark-tiny-onnx
  sparkconv lint model.onnx --json | jq '.findings[] | select(.severity=="error")'
  sparkconv lint qnn/layer_00.aimet/layer_00.onnx --encodings qnn/layer_00.aimet/layer_00.encodings`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("lint takes one or more FILE.onnx or folders")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return lintAll(cmd, args, encodings) },
	}
	cmd.Flags().StringVar(&encodings, "encodings", "", "also lint this AIMET encodings file against the graph")
	freeForm(cmd, "encodings")
	rootCmd.AddCommand(cmd)
}

// lintAll lints one file as before, or several with one summary.
func lintAll(cmd *cobra.Command, args []string, encodings string) error {
	files, err := qnn.GraphFiles(args)
	if err != nil {
		return err
	}
	if len(files) == 1 {
		_, err := runLint(cmd, files[0], encodings, jsonOut)
		return err
	}
	if encodings != "" {
		return usagef("--encodings pairs with one graph; %d were given", len(files))
	}
	var all struct {
		Files    []qnn.Report `json:"files"`
		Errors   int          `json:"errors"`
		Warnings int          `json:"warnings"`
	}
	bad := 0
	for _, f := range files {
		rep, err := runLint(cmd, f, "", false)
		if rep == nil {
			return err
		}
		if rep.Errors > 0 {
			bad++
		}
		all.Files = append(all.Files, *rep)
		all.Errors += rep.Errors
		all.Warnings += rep.Warnings
	}
	err = printJSONOr(all, func() {
		fmt.Fprintf(cmd.OutOrStdout(), "%d files: %d errors, %d warnings\n", len(files), all.Errors, all.Warnings)
	})
	if err != nil {
		return err
	}
	if all.Errors > 0 {
		return reported(fmt.Errorf("%d QNN lint errors in %d of %d files", all.Errors, bad, len(files)))
	}
	return nil
}

// runLint lints one graph (and its encodings); asJSON prints its report
// as the command's JSON document, else the human lines go to stdout unless
// --json is set.
func runLint(cmd *cobra.Command, path, encodings string, asJSON bool) (*qnn.Report, error) {
	rep, err := qnn.LintFile(path, encodings)
	if err != nil {
		return nil, err
	}
	if asJSON {
		if err := printJSON(rep); err != nil {
			return rep, err
		}
	} else if !jsonOut {
		out := cmd.OutOrStdout()
		for _, f := range rep.Findings {
			fmt.Fprintln(out, f)
		}
		fmt.Fprintf(out, "%s: %d errors, %d warnings (%d nodes)\n", path, rep.Errors, rep.Warnings, rep.Nodes)
	}
	if rep.Errors > 0 {
		return rep, reported(fmt.Errorf("%s: %d QNN lint errors", path, rep.Errors))
	}
	return rep, nil
}
