package convert

// The format interface and its one runner: a format file (gptq.go,
// w4a16.go, w8a8.go) declares what differs, Convert does the rest, after
// the pattern of ollama's ModelConverter and llama.cpp's per-type quant
// classes.

import (
	"context"
	"slices"

	"sparkconv/dtype"
	"sparkconv/forward"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// Format is one output format of convert (one file: convert/<format>.go,
// its reader beside it). Its value holds the format's options (group size,
// head, ...); Convert asks it, in this order, for CheckFlags, Check,
// Rounds, Targets, MixedDTypes, Grid, Method, Settings, Tensors and Config.
type Format interface {
	// Name is the scheme: the report's "scheme" and the progress bar's
	// label ("gptq", "w4a16", "w8a8").
	Name() string
	// CheckFlags refuses option values the consumer does not take (usage
	// errors), before anything is read.
	CheckFlags() error
	// Check refuses a model the consumer cannot load (CheckTargets with
	// the consumer's ShapeCheck) or options that do not fit it, before
	// anything is written.
	Check(cfg *spark.Config) error
	// Rounds reports whether, without a solver, every code is rounded to
	// nearest by package quant, whose quantizers refuse NaN/Inf as they
	// read: the input is then not scanned up front (StartAsRead).
	Rounds() bool
	// MixedDTypes reports whether, rounding to nearest, the format stores
	// each linear's parameters in that linear's own dtype, so that a model
	// whose linears differ in dtype converts; Convert then asks for the
	// activation dtype (Job.ActivationDType, which refuses such a model)
	// only for a solve.
	MixedDTypes() bool
	// Grid is the one grid value of the build for a model whose linears
	// are act ("" when MixedDTypes spared asking): what the solver, the
	// code chooser and the parts get.
	Grid(act dtype.DType) GridSpec
	// InputAct is the input rule of the format's runtime for a model of
	// activation dtype act: what the reader's forward and keep-float apply
	// to a quantized linear's input.
	InputAct(act dtype.DType) forward.Act
	// Targets are the linears the build quantizes.
	Targets(cfg *spark.Config) []Target
	// Method names the rule that chooses the codes without a solver (the
	// report's method; a solve's own replaces it).
	Method() string
	// Settings are the report's settings (nil for none).
	Settings(b *Build) map[string]any
	// Tensors lists the output tensors in the model's order and the input
	// tensor each one reads (for Job.WriteTensors).
	Tensors(b *Build) ([]safetensors.Tensor, map[string]string)
	// Config is the config.json keys the build sets (nil deletes one):
	// quantization_config and the format's own. Convert adds
	// tie_word_embeddings false when the head is a target.
	Config(b *Build) map[string]any
}

// Build is one conversion as Convert hands it to a format: the job, the
// model's activation dtype, the grid, the targets and the solution (nil
// without a solver).
type Build struct {
	Job      *Job
	Act      dtype.DType
	Grid     GridSpec
	Targets  []Target
	Solution Solution
}

// Convert converts the model in o.Model to format f in o.Out, its codes
// chosen by s (nil: round to nearest). The options and the model are
// checked before anything is written; the output appears complete or not
// at all.
func Convert(ctx context.Context, o Options, f Format, s Solver) (*Report, error) {
	if err := f.CheckFlags(); err != nil {
		return nil, err
	}
	if err := checkPaths(o); err != nil {
		return nil, err
	}
	cfg, err := spark.LoadConfig(o.Model)
	if err != nil {
		return nil, err
	}
	if err := f.Check(cfg); err != nil {
		return nil, err
	}
	begin := Start
	if s == nil && f.Rounds() {
		begin = StartAsRead // round to nearest refuses NaN/Inf as it quantizes
	}
	j, err := begin(ctx, o, f.Name())
	if err != nil {
		return nil, err
	}
	defer j.Close()
	b := &Build{Job: j, Targets: f.Targets(j.Model.Config)}
	if s != nil || !f.MixedDTypes() {
		if b.Act, err = j.ActivationDType(); err != nil {
			return nil, err
		}
	}
	b.Grid = f.Grid(b.Act)
	if err := checkScaleRange(j, b.Targets, b.Grid); err != nil {
		return nil, err
	}
	j.Report.Method, j.Report.Settings = f.Method(), f.Settings(b)
	if b.Solution, err = j.solve(s, SolveSpec{GridSpec: b.Grid, Targets: b.Targets}); err != nil {
		return nil, err
	}
	tensors, src := f.Tensors(b)
	set := f.Config(b)
	if slices.ContainsFunc(b.Targets, func(t Target) bool { return t.Module == "lm_head" }) {
		set["tie_word_embeddings"] = false // the quantized head is its own tensors
	}
	return j.Finish(tensors, src, set)
}
