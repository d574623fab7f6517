package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"sparkconv/qnn"
)

func init() {
	var out string
	var force bool
	cmd := &cobra.Command{
		Use:   "sanitize IN.onnx -o OUT.onnx [--force]",
		Short: "Rewrite the exporter constructs QNN refuses (IsNaN/Where guards, Reshape allowzero=1, rank-0 axes)",
		Long: `For graphs exported elsewhere (PyTorch's dynamo exporter emits all three):
  - removes Where(IsNaN(x), 0, x) guards: readers read x, the IsNaN and
    constants left without readers are dropped (harmless with a finite
    additive mask, where softmax cannot produce NaN);
  - sets allowzero=0 on Reshape whose target shape is a constant without 0
    (refuses, naming the node, when the shape holds 0 or is not constant);
  - rewrites rank-0 axes inputs (Squeeze, Unsqueeze, Reduce*, Slice, Pad) as
    1-D, copying the constant when other nodes read it too.
Then it lints the result and writes OUT.onnx: into a temporary file beside it,
fsynced and renamed into place; an existing OUT is replaced only with --force.
The output bytes are deterministic. Every change and every remaining lint
finding is reported; the exit status is 1 when lint errors remain (OUT is
still written). A model with external data must be written into the folder
of IN so that its relative data locations still resolve.`,
		Example: `  sparkconv sanitize dynamo.onnx -o dynamo-qnn.onnx
  sparkconv sanitize model.onnx -o model.onnx --force --json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("sanitize takes one IN.onnx, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usagef("-o OUT.onnx is required")
			}
			return runSanitize(cmd, args[0], out, force)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "output .onnx file")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing output file")
	freeForm(cmd, "output")
	rootCmd.AddCommand(cmd)
}

func runSanitize(cmd *cobra.Command, in, out string, force bool) error {
	rep, err := qnn.SanitizeFile(in, out, force)
	if err != nil {
		return err
	}
	err = printJSONOr(rep, func() {
		w := cmd.OutOrStdout()
		for _, c := range rep.Changes {
			fmt.Fprintln(w, "changed:", c)
		}
		for _, f := range rep.Findings {
			fmt.Fprintln(w, f)
		}
		fmt.Fprintf(w, "sanitize: wrote %s (%d bytes): %d changes; QNN lint: %d errors, %d warnings\n",
			out, rep.Bytes, len(rep.Changes), rep.Errors, rep.Warnings)
	})
	if err != nil {
		return err
	}
	if rep.Errors > 0 {
		return reported(fmt.Errorf("wrote %s, but %d QNN lint errors remain that sanitize does not fix", out, rep.Errors))
	}
	return nil
}
