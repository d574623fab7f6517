package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"sparkconv/onnxio"
	"sparkconv/onnxpb"
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

// sanitizeReport is sanitize's JSON output.
type sanitizeReport struct {
	Input    string        `json:"input"`
	Output   string        `json:"output"`
	Bytes    int64         `json:"bytes"`
	Changes  []qnn.Change  `json:"changes"`
	Errors   int           `json:"errors"`
	Warnings int           `json:"warnings"`
	Findings []qnn.Finding `json:"findings"`
}

func runSanitize(cmd *cobra.Command, in, out string, force bool) error {
	m, err := onnxio.ReadModelFile(in)
	if err != nil {
		return err
	}
	if locs := onnxio.ExternalLocations(m); len(locs) > 0 {
		ai, err1 := filepath.Abs(filepath.Dir(in))
		ao, err2 := filepath.Abs(filepath.Dir(out))
		if err1 != nil || err2 != nil || ai != ao {
			return fmt.Errorf("%s keeps tensor data in %s (relative to its folder); write %s into %s so those locations still resolve",
				in, strings.Join(locs, ", "), filepath.Base(out), filepath.Dir(in))
		}
	}
	changes, err := qnn.Sanitize(m)
	if err != nil {
		return fmt.Errorf("%s: %w; nothing written", in, err)
	}
	rep := sanitizeReport{Input: in, Output: out, Changes: changes, Findings: qnn.Lint(m)}
	if rep.Changes == nil {
		rep.Changes = []qnn.Change{}
	}
	if rep.Findings == nil {
		rep.Findings = []qnn.Finding{}
	}
	rep.Errors, rep.Warnings = qnn.Count(rep.Findings)
	markSanitized(m)
	info, err := onnxio.WriteFile(out, onnxio.Model{Proto: m}, onnxio.WriteOptions{Force: force, Owner: onnxio.SparkconvModel, Inputs: []string{in}})
	if err != nil {
		return err
	}
	rep.Bytes = info.Size
	if jsonOut {
		if err := printJSON(rep); err != nil {
			return err
		}
	} else {
		w := cmd.OutOrStdout()
		for _, c := range rep.Changes {
			fmt.Fprintln(w, "changed:", c)
		}
		for _, f := range rep.Findings {
			fmt.Fprintln(w, f)
		}
		fmt.Fprintf(w, "sanitize: wrote %s (%d bytes): %d changes; QNN lint: %d errors, %d warnings\n",
			out, rep.Bytes, len(rep.Changes), rep.Errors, rep.Warnings)
	}
	if rep.Errors > 0 {
		return reported(fmt.Errorf("wrote %s, but %d QNN lint errors remain that sanitize does not fix", out, rep.Errors))
	}
	return nil
}

// markSanitized records in the model's metadata_props that sanitize wrote
// it, by which a later --force recognises the file as sparkconv's.
func markSanitized(m *onnxpb.ModelProto) {
	for _, p := range m.MetadataProps {
		if p.GetKey() == onnxio.SanitizedBy {
			p.Value = proto.String(onnxio.SanitizedByValue)
			return
		}
	}
	m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(onnxio.SanitizedBy), Value: proto.String(onnxio.SanitizedByValue)})
}
