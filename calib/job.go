package calib

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"sparkconv/forward"
	"sparkconv/infile"
	"sparkconv/outdir"
	"sparkconv/progress"
	"sparkconv/tokenizer"
)

// Options are one calibrate run between folders (Run).
type Options struct {
	Model      string   // checkpoint folder (config.json, safetensors, tokenizer.json)
	Files      []string // samples files (ReadSamples' formats)
	Out        string   // output folder, written all at once
	Force      bool     // replace an existing Out
	SeqLen     int      // longest chunk in tokens
	MaxSamples int      // at most this many samples, drawn with Seed (0: all)
	Seed       uint64
	MinTokens  int       // fewest tokens the samples must give
	Log        io.Writer // warnings; nil: none
}

// Run takes every sample (or MaxSamples of them) with the model's
// tokenizer (Source.Take with All: MinTokens and the variety rule), and runs them through the reference forward
// into the statistics files of Out (Record). It returns the summary and the
// number of tokens run.
func Run(ctx context.Context, j Options) (*Summary, int, error) {
	if j.Log == nil {
		j.Log = io.Discard
	}
	if len(j.Files) == 0 {
		return nil, 0, fmt.Errorf("calibrate: no samples files")
	}
	// The model's files, checked unchanged before the output is committed.
	stamps, err := infile.StampFolder(j.Model)
	if err != nil {
		return nil, 0, err
	}
	tok, err := tokenizer.Load(filepath.Join(j.Model, "tokenizer.json"))
	if err != nil {
		return nil, 0, fmt.Errorf("calibrate needs the model's tokenizer: %w", err)
	}
	m, err := forward.Open(j.Model, forward.Options{CachedLayers: 1}) // each layer is used once
	if err != nil {
		return nil, 0, err
	}
	defer m.Close()
	src := Source{Files: j.Files, Tok: tok, Vocab: m.Cfg.VocabSize, MinTokens: j.MinTokens, MinFlag: "--min-tokens", Log: j.Log}
	text, err := src.Take(&All{MaxSamples: j.MaxSamples, Seed: j.Seed, SeqLen: j.SeqLen})
	if err != nil {
		return nil, 0, err
	}
	texts, chunks, total := text.Texts, text.Chunks, text.Tokens
	d, err := outdir.Create(j.Out, j.Force, append([]string{j.Model}, j.Files...)...)
	if err != nil {
		return nil, 0, err
	}
	defer d.Abort()
	bar := progress.New(int64((m.Cfg.NumLayers+1)*len(chunks)), "calibrate", false)
	s, err := Record(m, texts, chunks, d.Path(), RecordOptions{
		Ctx: ctx, Bar: bar, SeqLen: j.SeqLen, MaxSamples: j.MaxSamples, Seed: j.Seed,
	})
	if err != nil {
		return nil, 0, err
	}
	bar.Done(true)
	if err := infile.CheckAll(stamps); err != nil {
		return nil, 0, err
	}
	if err := d.Commit(); err != nil {
		return nil, 0, err
	}
	return s, total, nil
}
