package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"sparkconv/tokenizer"
)

var tokenizeFlags struct {
	tokenizer string
	special   bool
}

var tokenizeCmd = &cobra.Command{
	Use:   "tokenize --tokenizer FILE [--special]",
	Short: "Encode JSONL {\"text\": ...} lines from stdin into {\"ids\": [...]} lines on stdout",
	Long: `Reads one JSON object {"text": "..."} per line on stdin and writes one
{"ids": [...]} line per input line on stdout, encoded exactly as the Hugging
Face tokenizers library encodes with the given tokenizer.json. Added tokens
that appear in the text always become their own ids; --special also applies
the post-processor (add_special_tokens=true, e.g. Llama-2's leading <s>).
A line that is not such an object stops the run with an error naming the
line number. With --json a summary goes to stderr (stdout carries the ids).`,
	Args: cobra.NoArgs,
	RunE: runTokenize,
}

func init() {
	f := tokenizeCmd.Flags()
	f.StringVar(&tokenizeFlags.tokenizer, "tokenizer", "", "tokenizer.json to encode with (required)")
	f.BoolVar(&tokenizeFlags.special, "special", false, "add the post-processor's special tokens (add_special_tokens=true)")
	freeForm(tokenizeCmd, "tokenizer")
	rootCmd.AddCommand(tokenizeCmd)
}

func runTokenize(cmd *cobra.Command, _ []string) error {
	if tokenizeFlags.tokenizer == "" {
		return usagef("tokenize: --tokenizer FILE is required")
	}
	start := time.Now()
	tk, err := tokenizer.Load(tokenizeFlags.tokenizer)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	n, err := tk.EncodeJSONL(ctx, cmd.InOrStdin(), cmd.OutOrStdout(), tokenizeFlags.special)
	if err != nil {
		return fmt.Errorf("tokenize: stdin %w", err)
	}
	if jsonOut {
		fmt.Fprintf(os.Stderr, "{\"lines\": %d, \"vocab_size\": %d, \"seconds\": %.3f}\n",
			n, tk.VocabSize(), time.Since(start).Seconds())
	}
	return nil
}
