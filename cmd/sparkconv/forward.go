package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sparkconv/convert"
	"sparkconv/forward"
	"sparkconv/outdir"
	"sparkconv/safetensors"
	"sparkconv/tokenizer"
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
			return runForward(cmd, model, text, ids, dump, topK, force)
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

// dumpProducer is the metadata producer of a --dump file, by which
// --force recognises one to replace.
const dumpProducer = "sparkconv forward"

var dumpOwner = safetensors.MetadataOwner("producer", dumpProducer)

// forwardTopEntry is one next-token candidate.
type forwardTopEntry struct {
	ID    int     `json:"id"`
	Logit float32 `json:"logit"`
	Token *string `json:"token,omitempty"`
}

func runForward(cmd *cobra.Command, modelDir, text, idList, dump string, topK int, force bool) error {
	start := time.Now()
	var dumpFile *outdir.File
	if dump != "" {
		var err error
		if dumpFile, err = outdir.NewFile(dump, force, dumpOwner, modelDir); errors.Is(err, outdir.ErrOverlap) {
			return usageError{fmt.Errorf("--dump: %w", err)}
		} else if err != nil {
			return fmt.Errorf("--dump: %w", err)
		}
	}
	tok, err := loadModelTokenizer(modelDir, text != "")
	if err != nil {
		return err
	}
	var input []int
	if text != "" {
		if input, err = tok.Encode(text, true); err != nil {
			return err
		}
		if len(input) == 0 {
			return fmt.Errorf("--text gives no tokens")
		}
	} else if input, err = parseTokenIDs(idList); err != nil {
		return usagef("--ids: %v", err)
	}
	m, err := convert.OpenForward(modelDir, forward.Options{})
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkIn("top-k", int64(topK), 1, int64(m.Cfg.VocabSize), "the model's vocab_size"); err != nil {
		return err
	}
	opt := forward.PrefillOptions{Dump: dump != "", Logits: forward.LastLogits}
	if opt.Dump {
		opt.Logits = forward.AllLogits
	}
	r, err := m.Prefill(input, opt)
	if err != nil {
		return err
	}
	V := m.Cfg.VocabSize
	top := forwardTopK(r.Logits[len(r.Logits)-V:], topK, tok)
	if dump != "" {
		meta := safetensors.WriteOptions{Metadata: map[string]string{"producer": dumpProducer}}
		if err := safetensors.WriteFile(dumpFile, r.Tensors(m, input), meta); err != nil {
			return err
		}
	}
	if jsonOut {
		return printJSON(map[string]any{
			"model": modelDir, "format": m.W.Describe(), "tokens": len(input), "input_ids": input, "top_k": top,
			"dump": dump, "seconds": time.Since(start).Seconds(),
		})
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s, %d tokens; next-token top-%d after position %d:\n", m.W.Describe(), len(input), len(top), len(input)-1)
	for k, e := range top {
		s := ""
		if e.Token != nil {
			s = strconv.Quote(*e.Token)
		}
		fmt.Fprintf(w, "  %2d. id %-7d logit %10.4f  %s\n", k+1, e.ID, e.Logit, s)
	}
	if dump != "" {
		fmt.Fprintf(w, "wrote %s (%d layers, %d positions)\n", dump, m.Cfg.NumLayers, len(input))
	}
	return nil
}

// loadModelTokenizer loads dir/tokenizer.json; it is an error only when needed.
func loadModelTokenizer(dir string, needed bool) (*tokenizer.Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && !needed {
		return nil, nil
	}
	tok, err := tokenizer.Load(path)
	if err != nil && !needed {
		return nil, nil // the top-k prints without token strings
	}
	return tok, err
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

// forwardTopK returns the k largest logits, ties broken by the smaller id.
func forwardTopK(row []float32, k int, tok *tokenizer.Tokenizer) []forwardTopEntry {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return 0
	})
	var out []forwardTopEntry
	for _, id := range idx[:min(k, len(idx))] {
		e := forwardTopEntry{ID: id, Logit: row[id]}
		if tok != nil {
			s := tok.Decode([]int{id}, false)
			e.Token = &s
		}
		out = append(out, e)
	}
	return out
}
