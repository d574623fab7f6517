package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"sparkconv/eval"
	"sparkconv/infile"
	"sparkconv/pipeline"
	"sparkconv/spark"
)

// gateFlags are the builds' fidelity flags: --eval [FILE] measures the
// written build against its input on held-out text (eval's figures go into
// sparkconv-report.json), --max-kld and --min-top1 make the command exit 1
// when the build is worse (the build is kept: it was written and is
// reported, it just failed the gate).
type gateFlags struct {
	text    string
	maxKLD  float64
	minTop1 float64
}

// builtinText is --eval's value when given without one.
const builtinText = "builtin"

func (g *gateFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&g.text, "eval", "", "measure the build's fidelity on held-out text: --eval (built-in text) or --eval=FILE (samples)")
	f.Lookup("eval").NoOptDefVal = builtinText
	f.Float64Var(&g.maxKLD, "max-kld", 0, "exit 1 when the build's mean KLD exceeds this (implies --eval)")
	f.Float64Var(&g.minTop1, "min-top1", 0, "exit 1 when the build's same-top-1 fraction is below this, e.g. 0.9 (implies --eval)")
	freeForm(cmd, "eval")
	floatIn(cmd, "max-kld", 1e-9, 1e3).unset() // not given: no KLD gate
	floatIn(cmd, "min-top1", 1e-9, 1).unset()  // not given: no top-1 gate
}

// gate is the eval.Gate the flags ask for.
func (g *gateFlags) gate() eval.Gate {
	e := eval.Gate{On: g.text != "", MaxKLD: g.maxKLD, MinTop1: g.minTop1}
	if g.text != builtinText {
		e.Samples = g.text
	}
	return e
}

// check completes the gate flags: a gate without --eval scores the
// built-in text, and an --eval file must exist (a usage error); then the
// text is read and tokenized with model's tokenizer as the evaluation will
// read it (eval.Gate.Check), so that bad text is refused before the
// build, not after.
func (g *gateFlags) check(cmd *cobra.Command, model string) error {
	f := cmd.Flags()
	// The flag rules (floatIn) have checked --max-kld and --min-top1.
	if g.text == "" && (f.Changed("max-kld") || f.Changed("min-top1")) {
		g.text = builtinText
	}
	if g.text == "" {
		return nil
	}
	if g.text != builtinText {
		if _, err := os.Stat(g.text); err != nil {
			return usagef("--eval: %v", err)
		}
	}
	if _, err := spark.LoadConfig(model); err != nil {
		return nil // the build names what is wrong with the model
	}
	if err := g.gate().Check(model); err != nil {
		return fmt.Errorf("--eval: %w", err)
	}
	return nil
}

// warnSameText warns when the held-out text (flag held) has the same
// bytes as one of the calibration samples files: scores on the text the
// build or the ranges were fitted on overstate the fidelity.
func warnSameText(cmd *cobra.Command, held string, heldFile string, calib []string) {
	if heldFile == "" {
		return
	}
	h, err := fileSHA256(heldFile)
	if err != nil {
		return // the reader names the problem
	}
	for _, c := range calib {
		if s, err := fileSHA256(c); err == nil && s == h {
			fmt.Fprintf(cmd.ErrOrStderr(), "sparkconv: warning: %s %s is the calibration text %s (same bytes, sha256 %.12s...): its scores measure text the calibration saw and overstate the fidelity; give held-out text\n", held, heldFile, c, h)
			return
		}
	}
}

// fileSHA256 is the sha256 of a regular file's bytes, streamed.
func fileSHA256(path string) (string, error) {
	f, _, err := infile.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// finish prints a finished build: the gate's figures (if it ran), then
// print's summary; it returns the gate's verdict.
func (c *convertFlags) finish(cmd *cobra.Command, res *pipeline.Result, print func() error) error {
	if e := res.Eval; e != nil && !jsonOut {
		fmt.Fprintf(cmd.OutOrStdout(), "eval (%s, %d tokens): mean KLD %.6f ± %.6f, same top-1 %.2f %%, PPL ratio %.4f, greedy %d/%d exact\n",
			e.Text, e.TokensScored, e.KLD.Mean, e.KLD.Stderr, 100*e.SameTop1, e.PPLRatio, e.Greedy.Exact, e.Greedy.Prompts)
	}
	if err := print(); err != nil {
		return err
	}
	if res.Verdict != nil && jsonOut {
		return reported(res.Verdict)
	}
	return res.Verdict
}
