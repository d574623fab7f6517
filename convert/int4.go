package convert

// The 4-bit core: the machinery shared by the GPTQ-format W4A8 writer
// (gptq.go) and the tinygemm W4A16 writer (w4a16.go).
//
// Three concerns stay apart, as in package quant:
//   - the GRID (quant.Sym4 or quant.Asym4) maps a weight to a code and back;
//   - a CodeChooser decides the codes and group parameters of one linear
//     (round to nearest with the plain rule or the MSE scale search here;
//     package gptq's Hessian-based solve);
//   - an Int4Part packs the chosen codes or parameters into one checkpoint
//     tensor (GPTQ qweight/qzeros/scales/g_idx, tinygemm qweight/
//     scales_and_zeros).
//
// The safetensors writer asks for a tensor's parts far apart (within a file
// it orders tensors by dtype alignment, then name), so Int4Linear caches only
// the small encoded parameter parts between the requests, never the codes:
// when the codes are needed again they are recomputed from the cached
// parameters (a single rounding pass) if the chooser allows it, or chosen
// again otherwise.

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"sparkconv/dtype"
	"sparkconv/kernels"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// GridKind is a quantization grid of package quant (GridSpec adds its
// group, parameter dtype and search).
type GridKind int

// The grids of the output formats.
const (
	// GridSym4 is GPTQ's symmetric grid: w = (q - 8) * scale.
	GridSym4 GridKind = iota
	// GridAsym4 is tinygemm's grid with a float zero: w = (q - 8) * scale + zero.
	GridAsym4
	// GridInt8 is compressed-tensors' per-channel symmetric int8 grid:
	// w = q * scale (W8A8; the 4-bit methods below do not take it).
	GridInt8
	// GridUInt4 is compressed-tensors' asymmetric int4 grid with an integer
	// zero point z in 0..15: w = (q - z) * scale, carried as quant.Asym4
	// parameters with zero = (8 - z) * scale (quant.UInt4Zero).
	GridUInt4
)

// Zeros reports whether the grid's groups have a zero beside the scale.
func (g GridKind) Zeros() bool { return g == GridAsym4 || g == GridUInt4 }

func (g GridKind) String() string {
	switch g {
	case GridSym4:
		return "int4 symmetric"
	case GridAsym4:
		return "int4 asymmetric (tinygemm float zero)"
	case GridUInt4:
		return "int4 asymmetric (integer zero point)"
	}
	return "int8 per-channel symmetric"
}

// quantize chooses round-to-nearest codes for m, parameters from the plain
// rule (absmax / min-max) or the MSE search.
func (g GridKind) quantize(dst *quant.Int4Result, m quant.Matrix, group int, dt quant.ScaleDType, search bool) error {
	switch g {
	case GridSym4:
		return quant.QuantizeSym4(dst, m, group, dt, search)
	case GridUInt4:
		return quant.QuantizeUInt4(dst, m, group, dt, search)
	}
	return quant.QuantizeAsym4(dst, m, group, dt, search)
}

// recode writes into dst.Codes the nearest codes of m for dst's parameters.
func (g GridKind) recode(dst *quant.Int4Result, m quant.Matrix) {
	gpr := m.K / dst.Group
	dst.Codes = slices.Grow(dst.Codes[:0], m.N*m.K)[:m.N*m.K]
	kernels.Parallel(m.N, func(lo, hi int) {
		row := make([]float32, m.K)
		for n := lo; n < hi; n++ {
			w := m.Row(n, row)
			for gi := 0; gi < gpr; gi++ {
				codes := dst.Codes[n*m.K+gi*dst.Group : n*m.K+(gi+1)*dst.Group]
				seg := w[gi*dst.Group : (gi+1)*dst.Group]
				if g == GridSym4 {
					dst.Sym4(n, gi).Quantize(codes, seg)
				} else {
					dst.Asym4(n, gi).Quantize(codes, seg)
				}
			}
		}
	})
}

// plainBlock is the number of weights PlainStats quantizes at a time.
const plainBlock = 1 << 20

// PlainStats is the error of round-to-nearest with the plain rule (GPTQ
// absmax for GridSym4, torchao min/max for GridAsym4): the baseline the
// report shows beside the chosen codes. It works through blocks of rows so
// that it holds no full-size code buffer.
func (g GridKind) PlainStats(m quant.Matrix, group int, dt quant.ScaleDType) (quant.ErrStats, error) {
	rows := max(1, plainBlock/m.K)
	var total quant.ErrStats
	var r quant.Int4Result
	for n0 := 0; n0 < m.N; n0 += rows {
		n1 := min(m.N, n0+rows)
		sub := quant.Matrix{N: n1 - n0, K: m.K}
		if m.F32 != nil {
			sub.F32 = m.F32[n0*m.K : n1*m.K]
		} else {
			sub.BF16 = m.BF16[n0*m.K : n1*m.K]
		}
		if err := g.quantize(&r, sub, group, dt, false); err != nil {
			return total, err
		}
		total.Merge(r.Stats)
	}
	return total, nil
}

// CodeChooser decides the codes and group parameters of one linear W[N, K]
// on a 4-bit grid: how codes are chosen, apart from the grid and the packing.
type CodeChooser interface {
	// Method names the rule; it is recorded in the config and the report.
	Method() string
	// Choose fills dst (Codes, Scales, Zeros for the asymmetric grid,
	// Stats) for target t: t.Source is the tensor m was read from, t.Module
	// the module it becomes ("lm_head" for a tied head read from the
	// embedding).
	Choose(dst *quant.Int4Result, t Target, m quant.Matrix, group int, dt quant.ScaleDType) error
	// Recode recomputes dst.Codes of m from the parameters already in dst
	// when the codes are a function of them (round to nearest). It returns
	// false when they are not (a Hessian-based chooser), and the writer
	// then calls Choose again.
	Recode(dst *quant.Int4Result, m quant.Matrix) bool
}

// RTN rounds to the nearest point of the grid Kind, with group parameters from the
// MSE search over shrunk ranges (Search) or from the plain rule.
type RTN struct {
	Kind   GridKind
	Search bool
}

// Method is "rtn-mse-search" or "rtn-absmax" / "rtn-minmax".
func (c RTN) Method() string {
	switch {
	case c.Search:
		return "rtn-mse-search"
	case c.Kind == GridSym4:
		return "rtn-absmax"
	}
	return "rtn-minmax"
}

// Choose quantizes m with package quant's grid routines.
func (c RTN) Choose(dst *quant.Int4Result, _ Target, m quant.Matrix, group int, dt quant.ScaleDType) error {
	return c.Kind.quantize(dst, m, group, dt, c.Search)
}

// Recode recomputes the nearest codes for dst's parameters.
func (c RTN) Recode(dst *quant.Int4Result, m quant.Matrix) bool {
	c.Kind.recode(dst, m)
	return true
}

// What a part of a quantized linear is computed from.
const (
	UsesNothing = iota // depends on the shape only (GPTQ qzeros, g_idx)
	UsesParams         // the group parameters (scales, zeros)
	UsesCodes          // the codes (qweight)
)

// Int4Part is one checkpoint tensor of a quantized linear.
type Int4Part struct {
	Suffix string // appended to the module name: "qweight", "scales", ...
	DType  dtype.DType
	Shape  []int64
	Uses   int
	// Encode writes the part's bytes into dst (sized from DType and Shape)
	// from r (N, K, Group set; Codes and parameters as Uses says).
	Encode func(dst []byte, r *quant.Int4Result) error
	// Restore (UsesParams parts) decodes the parameters back into r.Scales
	// (and r.Zeros), already sized, from the part's bytes; the parts'
	// Restores run in the parts' order.
	Restore func(r *quant.Int4Result, src []byte) error
}

// Target is one linear to quantize, on any grid (the 4-bit formats and
// W8A8): the input tensor it reads and the module prefix of its output
// tensors.
type Target struct {
	Source string
	Module string
	N, K   int
}

// Targets lists the quantized linears of a model: the 5 linears of every
// layer, and the output head when quantHead (read from lm_head.weight, or
// from the tied embedding).
func Targets(cfg *spark.Config, quantHead bool) []Target {
	var out []Target
	for _, s := range cfg.Tensors() {
		if s.Kind == spark.KindLinear {
			out = append(out, Target{s.Name, s.Module(), int(s.Shape[0]), int(s.Shape[1])})
		}
	}
	if quantHead {
		out = append(out, Target{cfg.HeadWeight(), "lm_head", cfg.VocabSize, cfg.HiddenSize})
	}
	return out
}

// Int4Spec describes how one target is written: on Grid (its kind, group
// and parameter dtype; the kind also gives the report's plain baseline),
// codes from Chooser, as Parts.
type Int4Spec struct {
	Target  Target
	Grid    GridSpec
	Chooser CodeChooser
	Parts   []Int4Part
}

// int4Scratch is the code buffer shared by the linears of a job (the writer
// produces one tensor at a time).
type int4Scratch struct {
	mu  sync.Mutex
	res quant.Int4Result
}

// int4Linear is the state of one quantized linear while its parts are
// written.
// bigScratch: a code buffer larger than this (the quantized head, 1 byte
// per weight: 268 MB on the real model) is dropped after use and the memory
// handed back at once, so that it is not resident (as live data or as
// garbage not yet collected) while the rest of the model streams through.
const bigScratch = 64 << 20

type int4Linear struct {
	j       *Job
	spec    Int4Spec
	scratch *int4Scratch
	mu      sync.Mutex
	chosen  bool              // Choose has run (report entry added)
	cache   map[string][]byte // encoded UsesParams parts
	pending int               // parts using params or codes not yet produced
}

// int4Linear returns the lazily produced output tensors of one quantized
// linear, in the order of spec.Parts.
func (j *Job) int4Linear(spec Int4Spec, s *int4Scratch) []safetensors.Tensor {
	l := &int4Linear{j: j, spec: spec, scratch: s, cache: map[string][]byte{}}
	var out []safetensors.Tensor
	for _, p := range spec.Parts {
		if p.Uses != UsesNothing {
			l.pending++
		}
		out = append(out, safetensors.Tensor{
			Name: spec.Target.Module + "." + p.Suffix, DType: p.DType, Shape: p.Shape,
			Produce: func() ([]byte, error) {
				b, err := l.produce(p)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", spec.Target.Source, err)
				}
				return b, nil
			},
		})
	}
	return out
}

func partBytes(p Int4Part) int {
	n := p.DType.Size()
	for _, d := range p.Shape {
		n *= int(d)
	}
	return n
}

func (l *int4Linear) produce(p Int4Part) ([]byte, error) {
	if err := l.j.ctx.Err(); err != nil {
		return nil, err
	}
	t := l.spec.Target
	if p.Uses == UsesNothing {
		dst := make([]byte, partBytes(p))
		r := quant.Int4Result{N: t.N, K: t.K, Group: l.spec.Grid.Group}
		return dst, p.Encode(dst, &r)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.done()
	if b, ok := l.cache[p.Suffix]; ok && p.Uses == UsesParams {
		return b, nil
	}
	l.scratch.mu.Lock()
	defer l.scratch.mu.Unlock()
	r := &l.scratch.res
	defer func() {
		if cap(r.Codes) > bigScratch {
			*r = quant.Int4Result{}
			debug.FreeOSMemory()
		}
	}()
	// Unscanned read: either Start scanned the whole input, or the chooser
	// is round to nearest, whose quantizers refuse NaN/Inf row by row.
	info, raw, err := l.j.Model.Checkpoint.Raw(t.Source)
	if err != nil {
		return nil, err
	}
	m := weightMatrix(raw, info.DType, t.N, t.K)
	if err := l.codesAndParams(r, m); err != nil {
		return nil, err
	}
	if b, ok := l.cache[p.Suffix]; ok {
		return b, nil
	}
	dst := make([]byte, partBytes(p))
	return dst, p.Encode(dst, r)
}

// done counts a produced part and drops the cache after the last one.
func (l *int4Linear) done() {
	l.pending--
	if l.pending <= 0 {
		clear(l.cache)
	}
}

// codesAndParams fills r with codes and parameters: from the cached
// parameters and Recode when Choose has already run, else by Choose (then
// the report entry is added and the parameter parts cached).
func (l *int4Linear) codesAndParams(r *quant.Int4Result, m quant.Matrix) error {
	if l.chosen && l.restore(r) && l.spec.Chooser.Recode(r, m) {
		return nil
	}
	if err := l.spec.Chooser.Choose(r, l.spec.Target, m, l.spec.Grid.Group, l.spec.Grid.DType); err != nil {
		return err
	}
	for _, p := range l.spec.Parts {
		if p.Uses != UsesParams {
			continue
		}
		b := make([]byte, partBytes(p))
		if err := p.Encode(b, r); err != nil {
			return err
		}
		l.cache[p.Suffix] = b
	}
	if l.chosen {
		return nil
	}
	l.chosen = true
	return l.report(r, m)
}

// restore sizes r for the target and decodes the cached parameters into it.
func (l *int4Linear) restore(r *quant.Int4Result) bool {
	t := l.spec.Target
	ng := t.N * (t.K / l.spec.Grid.Group)
	r.N, r.K, r.Group = t.N, t.K, l.spec.Grid.Group
	r.Scales = slices.Grow(r.Scales[:0], ng)[:ng]
	r.Zeros = nil
	if l.spec.Grid.Kind.Zeros() {
		r.Zeros = slices.Grow(r.Zeros, ng)[:ng]
	}
	restored := false
	for _, p := range l.spec.Parts { // in order: a zero point may need its scale
		if p.Restore == nil {
			continue
		}
		b, ok := l.cache[p.Suffix]
		if !ok || p.Restore(r, b) != nil {
			return false
		}
		restored = true
	}
	return restored
}

func (l *int4Linear) report(r *quant.Int4Result, m quant.Matrix) error {
	plain := r.Stats
	g := l.spec.Grid
	if c, ok := l.spec.Chooser.(RTN); !ok || c.Search || c.Kind != g.Kind {
		var err error
		if plain, err = g.Kind.PlainStats(m, g.Group, g.DType); err != nil {
			return err
		}
	}
	p := plain.SNRdB()
	t := l.spec.Target
	l.j.AddTensor(TensorReport{
		Name:       t.Source,
		Scheme:     fmt.Sprintf("%s g%d, %s", g.Kind, g.Group, l.spec.Chooser.Method()),
		Shape:      []int64{int64(t.N), int64(t.K)},
		SNRdB:      r.Stats.SNRdB(),
		MaxErr:     r.Stats.MaxAbs,
		PlainSNRdB: &p,
		GPTQ:       l.j.moduleReport(t),
	})
	return nil
}

// EncodeInt4 quantizes one matrix as spec says and returns the bytes of
// each part (in spec.Parts order) and the error statistics of the chosen
// codes: the per-tensor path of the writers, without a checkpoint.
func EncodeInt4(spec Int4Spec, m quant.Matrix) ([][]byte, quant.ErrStats, error) {
	var r quant.Int4Result
	if err := spec.Chooser.Choose(&r, spec.Target, m, spec.Grid.Group, spec.Grid.DType); err != nil {
		return nil, r.Stats, err
	}
	out := make([][]byte, len(spec.Parts))
	for i, p := range spec.Parts {
		out[i] = make([]byte, partBytes(p))
		if err := p.Encode(out[i], &r); err != nil {
			return nil, r.Stats, fmt.Errorf("%s.%s: %w", spec.Target.Module, p.Suffix, err)
		}
	}
	return out, r.Stats, nil
}

// Int4Model lists the output tensors of a 4-bit build (a Format's
// Tensors): every target on b.Grid, its codes from the solution or else
// from c, written as parts(target); the rest of the model copied bit for
// bit. It returns the tensors and the input each one reads (for
// WriteTensors).
func (b *Build) Int4Model(c CodeChooser, parts func(Target) []Int4Part) ([]safetensors.Tensor, map[string]string) {
	j := b.Job
	if b.Solution != nil {
		c = b.Solution
	}
	targets := map[string]Target{}
	for _, t := range b.Targets {
		targets[t.Source] = t
	}
	var tensors []safetensors.Tensor
	src := map[string]string{}
	scratch := &int4Scratch{}
	add := func(t Target) {
		for _, out := range j.int4Linear(Int4Spec{Target: t, Grid: b.Grid, Chooser: c, Parts: parts(t)}, scratch) {
			tensors = append(tensors, out)
			src[out.Name] = t.Source
		}
	}
	for _, s := range j.Model.Config.Tensors() {
		t, ok := targets[s.Name]
		if ok && (s.Kind == spark.KindLinear || s.Kind == spark.KindHead) {
			add(t)
			continue
		}
		tensors = append(tensors, j.Copy(s.Name))
		src[s.Name] = s.Name
		j.Report.Totals.Copied++
	}
	if t, ok := targets[spark.EmbedName]; ok { // the tied head, untied
		add(t)
	}
	return tensors, src
}

// ShapeCheck returns the reasons a target rejects a linear [N, K] (none
// when it loads).
type ShapeCheck func(t Target) []string

// CheckTargets applies check to every target and returns one error
// listing each distinct problem once, naming the first tensor (and its
// shape) that has it and how many others share it.
func CheckTargets(what string, targets []Target, check ShapeCheck) error {
	type problem struct {
		first string
		more  int
	}
	seen := map[string]*problem{}
	var order []string
	for _, t := range targets {
		for _, why := range check(t) {
			if p, ok := seen[why]; ok {
				p.more++
				continue
			}
			seen[why] = &problem{first: fmt.Sprintf("%s [%d, %d] (N=%d out, K=%d in)", t.Source, t.N, t.K, t.N, t.K)}
			order = append(order, why)
		}
	}
	if len(order) == 0 {
		return nil
	}
	lines := make([]string, len(order))
	for i, why := range order {
		p := seen[why]
		more := ""
		if p.more > 0 {
			more = fmt.Sprintf(" (and %d more tensors)", p.more)
		}
		lines[i] = fmt.Sprintf("%s: %s%s", p.first, why, more)
	}
	return fmt.Errorf("%s cannot load this model:\n  %s", what, strings.Join(lines, "\n  "))
}

// int4Settings are the report settings of a 4-bit build on grid g.
func int4Settings(g GridSpec, quantHead bool) map[string]any {
	return map[string]any{"group_size": g.Group, "search": g.Search, "quant_head": quantHead, "scales_dtype": g.DType.String()}
}

// ActivationDType is the dtype of the model's linears (all the same), the
// activation dtype the checkpoint is made for.
func (j *Job) ActivationDType() (dtype.DType, error) {
	var dt dtype.DType
	for _, t := range Targets(j.Model.Config, false) {
		info, _ := j.Model.Info(t.Source)
		if dt != "" && info.DType != dt {
			return "", fmt.Errorf("%s is %s but other linears are %s: mixed-dtype models are not supported", t.Source, info.DType, dt)
		}
		dt = info.DType
	}
	if dt == "" {
		return "", errors.New("model has no linear layers")
	}
	return dt, nil
}
