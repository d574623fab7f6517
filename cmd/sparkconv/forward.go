package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"sparkconv/nexttoken"
)

func init() {
	var model, text, ids, dump string
	var force bool
	var topK int
	cmd := &cobra.Command{
		Use:   "forward --model DIR (--text S | --ids 1,2,3) [--top-k 5] [--dump FILE.safetensors]",
		Short: "Run the fp32 reference forward of any checkpoint or sparkconv output: next-token top-k, optionally every layer's tensors",
		Long: `Runs the float32 reference forward (bf16 weights multiplied in place, each
widened exactly inside the kernels) over a token sequence and prints the top-k next tokens after its last position. --model may
also be a quantized sparkconv output (W8A8, GPTQ, W4A16): its weights are
dequantized by the format's reader and each quantized linear's input is
quantized as the runtime's kernel does it (W4A8 and W8A8: int8 per token;
W4A16: bf16). --text is
encoded with the model folder's tokenizer.json (with its special tokens);
--ids gives the ids directly. --dump writes, for every position, the tensors of
the reference dumps in testdata/golden/*/expected.safetensors under the same
names: input_ids, logits
[T,V], hidden_in.{i} [T,H], key.{i} and value.{i} [T,KV,D] (keys after RoPE),
hidden_out and final_norm [T,H]. An existing dump file is replaced only with
--force.`,
		Example: `  sparkconv forward --model /tmp/spark-tiny --text "The weather in Paris is"
  sparkconv forward --model testdata/golden/spark-mini-tied --ids 493,113,443 --dump /tmp/out.safetensors --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" {
				return usagef("--model is required")
			}
			if (text == "") == (ids == "") {
				return usagef("give exactly one of --text and --ids")
			}
			return runForward(cmd, nexttoken.Options{Model: model, Text: text, TopK: topK, Dump: dump, Force: force}, ids)
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "model folder (config.json + safetensors [+ tokenizer.json])")
	f.StringVar(&text, "text", "", "input text, encoded with the model's tokenizer.json")
	f.StringVar(&ids, "ids", "", "input token ids, comma-separated")
	f.IntVar(&topK, "top-k", 5, "how many next-token candidates to print")
	f.StringVar(&dump, "dump", "", "write every position's tensors to this .safetensors file")
	f.BoolVar(&force, "force", false, "replace an existing --dump file")
	freeForm(cmd, "model", "text", "dump")
	checkedBy(cmd, "ids", "comma-separated token ids (non-negative integers)",
		func(s string) error { _, err := parseTokenIDs(s); return err }, "x", "1,,2", "-1", "1.5", "NaN", "99999999999999999999").unset()
	intIn(cmd, "top-k", 1, 1<<24)
	rootCmd.AddCommand(cmd)
}

// runForward runs nexttoken.Run and prints its top-k (or the JSON result).
func runForward(cmd *cobra.Command, o nexttoken.Options, idList string) error {
	if o.Text == "" {
		ids, err := parseTokenIDs(idList)
		if err != nil {
			return usagef("--ids: %v", err)
		}
		o.IDs = ids
	}
	r, err := nexttoken.Run(o)
	if errors.As(err, new(nexttoken.TopKError)) {
		return usageError{err}
	} else if err != nil {
		return err
	}
	if jsonOut {
		return printJSON(r)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s, %d tokens; next-token top-%d after position %d:\n", r.Format, r.Tokens, len(r.TopK), r.Tokens-1)
	for k, e := range r.TopK {
		s := ""
		if e.Token != nil {
			s = strconv.Quote(*e.Token)
		}
		fmt.Fprintf(w, "  %2d. id %-7d logit %10.4f  %s\n", k+1, e.ID, e.Logit, s)
	}
	if r.Dump != "" {
		fmt.Fprintf(w, "wrote %s (%d layers, %d positions)\n", r.Dump, r.Layers, r.Tokens)
	}
	return nil
}

// parseTokenIDs reads "1,2,3" (spaces allowed around each id).
func parseTokenIDs(s string) ([]int, error) {
	var ids []int
	for k, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		id, err := strconv.Atoi(f)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("item %d %q is not a token id (a non-negative integer)", k+1, f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
