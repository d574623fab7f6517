package eval

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sparkconv/convert"
	"sparkconv/corpus"
	"sparkconv/forward"
	"sparkconv/infile"
	"sparkconv/progress"
	"sparkconv/spark"
	"sparkconv/tokenizer"
)

// Options are one evaluation between folders and files (the flags of eval and
// of the builds' --eval).
type Options struct {
	Base       string // the original checkpoint folder
	Build      string // the scored folder, named in the report
	Samples    string // held-out text file; "" (and no IDs): corpus.HeldOut
	IDs        string // file of token ids, taken as they are
	BaseLogits string // the base's log-probs file: computed when absent, reused when present
	Report     string // HTML report to write; "": none
	Settings
	// OpenBuild opens what is scored; nil: Build through the reference
	// forward (convert.OpenForward).
	OpenBuild func() (Model, func(), error)
}

// promptLen is the length of each greedy prompt in tokens.
const promptLen = 32

// Run scores the build against the base on the job's text: the base's
// log-probs first (EnsureBase), then the build (Evaluate), and the report.
// inputs are every path the job reads, which neither output may overlap.
func Run(j Options, inputs ...string) (*Result, error) {
	if err := j.Settings.Check(); err != nil {
		return nil, err
	}
	cfg, text, err := j.check()
	if err != nil {
		return nil, err
	}
	// Every file the models are read from, stamped now and checked before
	// any result is given: a shard rewritten meanwhile mixes two models.
	stamps, err := infile.StampFolder(j.Base)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(j.Build); err == nil && st.IsDir() {
		more, err := infile.StampFolder(j.Build)
		if err != nil {
			return nil, err
		}
		stamps = append(stamps, more...)
	}
	windows := int64(text.Windows(j.Ctx))
	bar := progress.New(windows, "eval base", false)
	opt := j.Settings
	if opt.BaseID, err = baseID(j.Base); err != nil {
		return nil, err
	}
	opt.Unchanged = func() error { return infile.CheckAll(stamps) }
	opt.Progress = func(n int) { bar.Add(int64(n)) }
	b, done, err := EnsureBase(j.BaseLogits, openForward(j.Base), text, opt, cfg.VocabSize, append(inputs, j.Report)...)
	bar.Done(true)
	if err != nil {
		return nil, err
	}
	defer done()
	open := j.OpenBuild
	if open == nil {
		open = openForward(j.Build)
	}
	build, closeBuild, err := open()
	if err != nil {
		return nil, err
	}
	defer closeBuild()
	bar = progress.New(windows, "eval build", false)
	opt.Progress = func(n int) { bar.Add(int64(n)) }
	r, err := Evaluate(b, build, opt)
	bar.Done(true)
	if err != nil {
		return nil, err
	}
	if err := infile.CheckAll(stamps); err != nil {
		return nil, err
	}
	r.Attribute(text.Spans)
	if j.Report != "" {
		if err := WriteReport(j.Report, r, j.Build, j.Force, append(inputs, j.BaseLogits)...); err != nil {
			return nil, fmt.Errorf("--report: %w", err)
		}
	}
	return r, nil
}

// Check reads and checks the job's config and text as Run does, without
// running anything: what a build's --eval=FILE checks before the build.
func (j Options) Check() error {
	if err := j.Settings.Check(); err != nil {
		return err
	}
	_, _, err := j.check()
	return err
}

// check reads the base's config and the text, which must hold a window.
func (j Options) check() (*spark.Config, *Text, error) {
	cfg, err := spark.LoadConfig(j.Base)
	if err != nil {
		return nil, nil, err
	}
	text, err := j.text(cfg.VocabSize)
	if err != nil {
		return nil, nil, err
	}
	if text.Windows(j.Ctx) == 0 {
		return nil, nil, fmt.Errorf("%s gives %d tokens, fewer than one window of --ctx %d", text.Source, len(text.Stream), j.Ctx)
	}
	return cfg, text, nil
}

// baseID is the sha256 of what the base model is: its config.json and
// weight files (names, sizes and bytes, in name order), recorded in the
// base file so that a file made from another base is never reused.
func baseID(dir string) (string, error) {
	stamps, err := infile.StampFolder(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, s := range stamps { // os.ReadDir's order: by name
		name := filepath.Base(s.Path)
		if name != "config.json" && !strings.HasSuffix(name, ".safetensors") {
			continue
		}
		f, _, err := infile.Open(s.Path)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, s.Size)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("%s: %w", s.Path, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// openForward opens dir through the reference forward, as a Model.
func openForward(dir string) func() (Model, func(), error) {
	return func() (Model, func(), error) {
		m, err := convert.OpenForward(dir, forward.Options{})
		if err != nil {
			return nil, nil, err
		}
		return Forward{M: m}, func() { m.Close() }, nil
	}
}

// text reads the evaluation text the job names.
func (j Options) text(vocab int) (*Text, error) {
	if j.IDs != "" { // streamed: MaxTokens ids at most are ever held
		f, _, err := infile.OpenCapped(j.IDs, infile.TextMax)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return ReadIDs(f, j.IDs, vocab, promptLen)
	}
	tok, err := tokenizer.Load(filepath.Join(j.Base, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("--base: %w (give --ids to score token ids without a tokenizer)", err)
	}
	if j.Samples == "" {
		return TextFromSamples([]byte(corpus.HeldOut), corpus.HeldOutName, false, tok, promptLen)
	}
	data, err := infile.ReadFile(j.Samples, infile.EvalTextMax)
	if err != nil {
		return nil, err
	}
	return TextFromSamples(data, j.Samples, strings.EqualFold(filepath.Ext(j.Samples), ".jsonl"), tok, promptLen)
}
