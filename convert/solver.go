package convert

// Calibrated conversions: a Solver (package gptq) chooses the codes of the
// whole model before the checkpoint is written, because its choice for a
// layer depends on the quantized layers before it, while the writer asks
// for tensors in file order (dtype, then name). What it did goes into the
// config (Calibration) and the report (one ModuleReport per target).

import (
	"context"
	"fmt"
	"os"
	"unsafe"

	"sparkconv/dtype"
	"sparkconv/quant"
)

// GridSpec is one value for what a linear is quantized to, carried from
// the format (Format.Grid) to the solve (SolveSpec) and the 4-bit writer
// (Int4Spec): the grid, its group size along K (0 for per-channel int8),
// the dtype its parameters are stored in, and whether group parameters
// come from the MSE search or the plain rule.
type GridSpec struct {
	Kind   GridKind
	Group  int
	DType  quant.ScaleDType
	Search bool
}

// RoundTrip returns the weights w [n, k] rounded to nearest on the grid
// and dequantized: what the build makes of a linear without a solve (for
// int8, amax/127.5 per row in s.DType; for 4 bits, s.Group's parameters by
// the search or the plain rule).
func (s GridSpec) RoundTrip(w []float32, n, k int) ([]float32, error) {
	m := quant.F32Matrix(n, k, w)
	out := make([]float32, n*k)
	if s.Kind == GridInt8 {
		scales, err := quant.Int8Scales(m, s.DType)
		if err != nil {
			return nil, err
		}
		var r quant.Int8Result
		if err := quant.QuantizeInt8Scaled(&r, m, scales); err != nil {
			return nil, err
		}
		r.Dequantize(out)
		return out, nil
	}
	var r quant.Int4Result
	if err := s.Kind.quantize(&r, m, s.Group, s.DType, s.Search); err != nil {
		return nil, err
	}
	r.Dequantize(out)
	return out, nil
}

// SolveSpec is what a Solver is asked for: the grid and every target.
type SolveSpec struct {
	GridSpec
	Targets []Target
}

// Solver chooses the codes of every target. Solve runs once the model is
// open and checked and the temporary output folder exists (scratch files go
// there, see Job.Scratch), before any tensor is written.
type Solver interface {
	Solve(j *Job, s SolveSpec) (Solution, error)
}

// Solution serves the solved codes to the writers.
type Solution interface {
	CodeChooser // the 4-bit grids
	// ChooseInt8 fills dst (Codes, Scales, Stats) for target t.
	ChooseInt8(dst *quant.Int8Result, t Target) error
	// Calibration says what was done, for the config and the report.
	Calibration() *Calibration
	// Module is target t's entry in the report (nil if none).
	Module(t Target) *ModuleReport
	// Replaced returns new values for a float tensor the solver changed
	// (SmoothQuant's folded norms and scaled g_proj), written in the
	// tensor's dtype instead of the input's bytes.
	Replaced(name string) ([]float32, bool)
}

// Calibration is what a calibrated conversion did, recorded in the
// config's quantization_config (meta) and the report.
type Calibration struct {
	Method         string   `json:"method"`  // "gptq"
	Sources        []string `json:"sources"` // samples files, or "embedded corpus"
	SHA256         string   `json:"sha256"`  // of the samples files' bytes, concatenated in order
	Samples        int      `json:"samples"` // samples with at least one token used
	Tokens         int64    `json:"tokens"`  // tokens run through the model
	HessianTokens  int64    `json:"hessian_tokens"`
	HeldOutTokens  int64    `json:"held_out_tokens"`
	TokenBudget    int      `json:"token_budget"`
	SeqLen         int      `json:"seq_len"`
	DampPercent    float64  `json:"damp_percent"`
	BlockSize      int      `json:"block_size"`
	ActOrder       bool     `json:"act_order"`
	StaticGroups   bool     `json:"static_groups"`
	TrueSequential bool     `json:"true_sequential"`
	Sequential     string   `json:"sequential"`
	Kernels        string   `json:"kernels"` // the kernel family that ran the forward (kernels.Family)
	// WeightedSearch: each 4-bit group's parameter search weighed a
	// weight's error by its input channel's activation energy (the
	// Hessian's diagonal).
	WeightedSearch bool `json:"weighted_search"`
	// RefitSweeps: sweeps of the least-squares refit of the group
	// parameters to the solved codes under the Hessian (0: none);
	// RefitRounds: solves of the codes with it (each after the first
	// taking the refitted parameters as given).
	RefitSweeps int     `json:"refit_sweeps"`
	RefitRounds int     `json:"refit_rounds,omitempty"`
	SmoothAlpha float64 `json:"smoothquant_alpha,omitempty"`
	// FloatTarget: the weight of the float model's output in each layer
	// linear's target (asymmetric calibration, GPTAQ's objective; 0:
	// absent, each linear solved toward its own weights).
	FloatTarget float64    `json:"float_target,omitempty"`
	Fallbacks   []Fallback `json:"fallbacks"`
	Redamped    []Redamp   `json:"redamped"`
	ForwardS    float64    `json:"forward_s"`
	SolveS      float64    `json:"solve_s"`
	PeakRSSMB   float64    `json:"peak_rss_mb"`
}

// Fallback is a module that was not quantized by the GPTQ solve.
type Fallback struct {
	Module string `json:"module"`
	Method string `json:"method"` // what it got instead
	Reason string `json:"reason"`
}

// Redamp is a module whose GPTQ codes were solved with more damping than
// the requested damp_percent: its Hessian did not factor at the requested
// damping, or the codes at that damping lost to round to nearest on
// held-out rows and a more damped solve won.
type Redamp struct {
	Module      string  `json:"module"`
	DampPercent float64 `json:"damp_percent"`
}

// ModuleReport is one target's calibration record. The output errors are
// ||X (W - Q)^T||^2 / ||X W^T||^2 over the held-out rows X (never in the
// Hessian), for the chosen codes and for round to nearest on the same
// weights and grid.
type ModuleReport struct {
	Method      string  `json:"method"` // "gptq" or "rtn"
	Input       string  `json:"input"`  // the activation whose Hessian it used
	DampPercent float64 `json:"damp_percent"`
	DampTries   int     `json:"damp_tries"`
	Tokens      int64   `json:"tokens"`
	HeldOutRows int     `json:"held_out_rows"`
	OutErr      float64 `json:"held_out_rel_err"`
	OutErrRTN   float64 `json:"held_out_rel_err_rtn"`
	SolveS      float64 `json:"solve_s"`
	Fallback    string  `json:"fallback,omitempty"`
	Note        string  `json:"note,omitempty"`
}

// AuxFile returns the contents of an auxiliary input file (tokenizer.json,
// ...) as read at Start, and whether the model folder had it.
func (j *Job) AuxFile(name string) ([]byte, bool) {
	for _, a := range j.aux {
		if a.name == name {
			return a.data, true
		}
	}
	return nil, false
}

// Context is the job's context (cancelled on interrupt).
func (j *Job) Context() context.Context { return j.ctx }

// Scratch creates a file inside the temporary output folder that is
// removed before the folder is committed (and with it on abort).
func (j *Job) Scratch(name string) (*os.File, error) {
	f, err := os.OpenFile(j.Dir.Join(name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("scratch file: %w", err)
	}
	j.scratch = append(j.scratch, f)
	return f, nil
}

// removeScratch closes and deletes the scratch files.
func (j *Job) removeScratch() error {
	for _, f := range j.scratch {
		f.Close()
		if err := os.Remove(f.Name()); err != nil {
			return err
		}
	}
	j.scratch = nil
	return nil
}

// WeightMatrix returns the named float tensor as a quant matrix [N, K]
// (bf16 viewed without a copy, F16/F32 decoded).
func (j *Job) WeightMatrix(name string, n, k int) (quant.Matrix, error) {
	info, raw, err := j.Model.Raw(name)
	if err != nil {
		return quant.Matrix{}, err
	}
	if int(info.NumElements()) != n*k {
		return quant.Matrix{}, fmt.Errorf("%s has %d values, want %d x %d", name, info.NumElements(), n, k)
	}
	return weightMatrix(raw, info.DType, n, k), nil
}

// solve runs s (if set) for the targets and records its calibration in the
// report; it returns nil when s is nil.
func (j *Job) solve(s Solver, spec SolveSpec) (Solution, error) {
	if s == nil {
		return nil, nil
	}
	sol, err := s.Solve(j, spec)
	if err != nil {
		return nil, err
	}
	j.solution = sol
	j.Report.Calibration = sol.Calibration()
	j.Report.Method = sol.Method()
	return sol, nil
}

// moduleReport is the solution's entry for a target, if any.
func (j *Job) moduleReport(t Target) *ModuleReport {
	if j.solution == nil {
		return nil
	}
	return j.solution.Module(t)
}

// ScaleDType maps a weight dtype to the dtype its scales are stored in.
func ScaleDType(dt dtype.DType) quant.ScaleDType {
	switch dt {
	case dtype.BF16:
		return quant.ScaleBF16
	case dtype.F16:
		return quant.ScaleF16
	}
	return quant.ScaleF32
}

// weightMatrix views a float tensor's raw little-endian bytes as a quant
// matrix without copying bf16 (the common case); F16 and F32 are decoded.
func weightMatrix(raw []byte, dt dtype.DType, n, k int) quant.Matrix {
	if dt == dtype.BF16 {
		return quant.BF16Matrix(n, k, unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(raw))), len(raw)/2))
	}
	f := make([]float32, n*k)
	_ = dtype.ToFloat32(f, raw, dt)
	return quant.F32Matrix(n, k, f)
}

// calMeta records a calibration in a config's meta.
func calMeta(meta map[string]any, cal *Calibration) {
	meta["method"] = cal.Method
	meta["calibration"] = map[string]any{
		"sources": cal.Sources, "sha256": cal.SHA256, "samples": cal.Samples, "tokens": cal.Tokens,
		"hessian_tokens": cal.HessianTokens, "token_budget": cal.TokenBudget, "seq_len": cal.SeqLen,
	}
	meta["damp_percent"] = cal.DampPercent
	meta["act_order"] = cal.ActOrder
	meta["static_groups"] = cal.StaticGroups
	meta["true_sequential"] = cal.TrueSequential
	meta["sequential"] = cal.Sequential
	meta["kernels"] = cal.Kernels
	if cal.FloatTarget > 0 {
		meta["float_target"] = cal.FloatTarget
	}
	fb := []string{}
	for _, f := range cal.Fallbacks {
		fb = append(fb, f.Module+": "+f.Method)
	}
	meta["fallbacks"] = fb
	rd := []string{}
	for _, d := range cal.Redamped {
		rd = append(rd, fmt.Sprintf("%s: %g", d.Module, d.DampPercent))
	}
	meta["redamped"] = rd
}
