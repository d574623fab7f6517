// Command calibtokens writes the token chunks that sparkconv's gptq, w4a16
// and w8a8 calibrate on, so that a peer quantizer can be given the very
// same tokens (scripts/peers/run.sh).
//
//	go run ./scripts/peers/calibtokens --model DIR [--tokens N] [--seq-len N] [--samples FILE]... > chunks.jsonl
//
// Each output line is one chunk, {"sample": S, "start": A, "ids": [...]}: a
// run of at most --seq-len tokens of sample S starting at its token A, each
// chunk its own sequence (positions from 0), in the order sparkconv runs
// them. A summary (chunks, samples, tokens) goes to stderr.
//
// The chunks come from sparkconv's own code: tokenizer.Load, then
// calib.Share (the text read, encoded and the budget spread over the
// samples), the function a conversion calls. run.sh checks the summary
// against the samples and tokens that sparkconv's own report
// (sparkconv-report.json) records for the same run.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"sparkconv/calib"
	"sparkconv/gptq"
	"sparkconv/spark"
	"sparkconv/tokenizer"
)

type files []string

func (f *files) String() string     { return fmt.Sprint(*f) }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	var samples files
	model := flag.String("model", "", "model folder (config.json and tokenizer.json)")
	budget := flag.Int("tokens", gptq.DefaultBudget, "calibration tokens (sparkconv's --tokens)")
	seqLen := flag.Int("seq-len", gptq.DefaultSeqLen, "longest chunk in tokens (sparkconv's --seq-len)")
	flag.Var(&samples, "samples", "samples file (sparkconv's --samples; repeatable; none: the embedded corpus)")
	flag.Parse()
	if *model == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: calibtokens --model DIR [--tokens N] [--seq-len N] [--samples FILE]...")
		os.Exit(2)
	}
	if *budget < gptq.MinTokens || *seqLen < 1 {
		fmt.Fprintf(os.Stderr, "calibtokens: --tokens must be at least %d and --seq-len at least 1\n", gptq.MinTokens)
		os.Exit(2)
	}
	if err := run(*model, samples, *budget, *seqLen); err != nil {
		fmt.Fprintln(os.Stderr, "calibtokens:", err)
		os.Exit(1)
	}
}

func run(model string, samples []string, budget, seqLen int) error {
	cfg, err := spark.LoadConfig(model)
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(filepath.Join(model, "tokenizer.json"))
	if err != nil {
		return err
	}
	src := calib.Source{Files: samples, Default: calib.CalibText, Tok: tok, Vocab: cfg.VocabSize, MinTokens: calib.MinTokens, Log: os.Stderr}
	text, err := src.Take(&calib.Share{Budget: budget, SeqLen: seqLen})
	if err != nil {
		return err
	}
	chunks, rd := text.Chunks, text.Read
	w := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(w)
	used, tokens := map[int]bool{}, 0
	for _, c := range chunks {
		if err := enc.Encode(map[string]any{"sample": c.Sample, "start": c.Start, "ids": c.IDs}); err != nil {
			return err
		}
		used[c.Sample] = true
		tokens += len(c.IDs)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "calibtokens: %d chunks, %d samples, %d tokens (budget %d, seq-len %d) of %s\n",
		len(chunks), len(used), tokens, budget, seqLen, rd.Sources[0])
	return nil
}
