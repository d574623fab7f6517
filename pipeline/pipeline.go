// Package pipeline runs a checkpoint build in the one order every build
// takes: the keep-float choice when asked (keepfloat, measured on the
// input model), the writer (a format through convert.Convert, or
// rotate.Run), and the fidelity gate on the committed output (eval.Gate).
// The commands only parse flags into its options and print its Result.
package pipeline

import (
	"context"
	"fmt"
	"io"

	"sparkconv/convert"
	"sparkconv/eval"
	"sparkconv/keepfloat"
	"sparkconv/rotate"
)

// Keep is what a build keeps in float (--keep-float, --keep-float-modules).
// The zero Keep keeps nothing.
type Keep struct {
	// Count, when above 0, measures every unit quantized alone on Tokens
	// tokens of Files (none: the embedded corpus) and keeps the Count
	// costliest (keepfloat.Choose).
	Count  int
	Tokens int
	Files  []string
	// Named is a kept set given by name (convert.KeepModules), not measured.
	Named *convert.KeepFloat
	Log   io.Writer // the measurement's progress and choice; nil: none
}

// Result is a finished build: its report (with the gate's figures), what
// it kept in float, the gate's figures and its verdict.
type Result struct {
	Report *convert.Report
	Kept   *convert.KeepFloat
	Eval   *eval.Result // nil without a gate
	// Verdict is the gate's failure: the build is written but missed a
	// bar. nil when it passed or no bar was set.
	Verdict error
}

// Convert builds format f of opt.Model into opt.Out with solver (nil:
// round to nearest): the kept set first, then the conversion, then the
// gate.
func Convert(ctx context.Context, opt convert.Options, f convert.Format, solver convert.Solver, keep Keep, gate eval.Gate) (*Result, error) {
	kept, err := keep.choose(ctx, &opt, f)
	if err != nil {
		return nil, err
	}
	if kept != nil {
		f = f.(convert.Keeper).WithKeep(kept)
	}
	r, err := convert.Convert(ctx, opt, f, solver)
	if err != nil {
		return nil, err
	}
	res, err := finish(ctx, gate, r, opt)
	if res != nil {
		res.Kept = kept
	}
	return res, err
}

// Rotate writes the rotated checkpoint (rotate.Run), then runs the gate.
func Rotate(ctx context.Context, o rotate.Options, gate eval.Gate) (*Result, error) {
	r, err := rotate.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	return finish(ctx, gate, r, o.Options)
}

// finish runs the gate on the committed build.
func finish(ctx context.Context, gate eval.Gate, r *convert.Report, opt convert.Options) (*Result, error) {
	res, verdict, err := gate.Apply(ctx, r, opt.Model, opt.Out)
	if err != nil {
		return nil, err
	}
	return &Result{Report: r, Eval: res, Verdict: verdict}, nil
}

// choose is the kept set of f's build, measured or named; the files the
// measurement read are added to opt.Stamps, so that the build commits only
// if they are unchanged and its codes and its choice come from one model.
func (k Keep) choose(ctx context.Context, opt *convert.Options, f convert.Format) (*convert.KeepFloat, error) {
	if k.Count == 0 && k.Named == nil {
		return nil, nil
	}
	if _, ok := f.(convert.Keeper); !ok {
		return nil, fmt.Errorf("the %s format keeps no linear in float", f.Name())
	}
	if k.Named != nil {
		return k.Named, nil
	}
	kept, _, err := keepfloat.Choose(ctx, opt.Model, keepfloat.Options{Count: k.Count, Files: k.Files, Tokens: k.Tokens, Format: f, Log: k.Log})
	if err != nil {
		return nil, err
	}
	opt.Stamps = append(opt.Stamps, kept.Stamps...)
	if k.Log != nil {
		fmt.Fprintf(k.Log, "sparkconv: keep-float: keeping %v in float\n", kept.Modules())
	}
	return kept, nil
}
