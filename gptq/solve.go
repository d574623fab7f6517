package gptq

import (
	"fmt"
	"slices"

	"sparkconv/kernels"
	"sparkconv/quant"
)

// BlockSize is the width of the column blocks whose updates are applied
// lazily (IST-DASLab's blocksize=128): within a block the error of each
// column is pushed into the block's later columns one by one; the rest of
// the row is updated once per block with a GEMM.
const BlockSize = 128

// panelBytes bounds the float64 working copy of W (a variable for the
// tests): rows are solved a panel
// at a time (they are independent given the factor), so the 131072-row head
// never needs a 2 GB copy.
var panelBytes = 64 << 20

// Result is a solved matrix: one code per weight (int8 codes as their
// two's-complement byte) and the parameters of every group.
type Result struct {
	N, K, Group int
	Codes       []uint8   // [N*K] row-major, in the original column order
	Scales      []float32 // [N, K/Group]
	Zeros       []float32 // [N, K/Group], asymmetric grid only (else nil)
	Stats       quant.ErrStats
}

// param returns the parameters of group i, counted over all rows (group
// gi of row n is n*(K/Group)+gi).
func (r *Result) param(i int) param {
	p := param{scale: r.Scales[i]}
	if r.Zeros != nil {
		p.zero = r.Zeros[i]
	}
	return p
}

// Dequantize writes row n's dequantized weights into dst[:K].
func (r *Result) Dequantize(g Grid, n int, dst []float32) {
	ng := r.K / r.Group
	for gi := range ng {
		lo := gi * r.Group
		g.values(r.param(n*ng+gi), r.Codes[n*r.K+lo:n*r.K+lo+r.Group], dst[lo:lo+r.Group])
	}
}

// size shapes r for an [n, k] matrix with groups of gs, reusing memory.
func (r *Result) size(n, k, gs int, zeros bool) {
	r.N, r.K, r.Group = n, k, gs
	r.Codes = slices.Grow(r.Codes[:0], n*k)[:n*k]
	ng := n * (k / gs)
	r.Scales = slices.Grow(r.Scales[:0], ng)[:ng]
	r.Zeros = nil
	if zeros {
		r.Zeros = make([]float32, ng)
	}
	r.Stats = quant.ErrStats{}
}

// Solve quantizes W (m) on grid g with GPTQ, given the factor of its
// input's Hessian. Group parameters come from the error-updated weights
// at each group boundary (in processing order); with f.Act, columns are
// processed in f.Perm's order but every group keeps its original columns,
// and its parameters are fitted up front from the original weights
// (static groups), so g_idx stays k/g. Weights of dead channels are set to
// zero first. Stats is the weight error against m.
//
// The working copy of W, the errors and the updates are float32 (the
// factor is computed in float64 and rounded once, f.U): every update is
// a float32 GEMM except inside sub-blocks of subBlock columns.
func Solve(dst *Result, m quant.Matrix, f *Factor, g Grid) error {
	return solve(dst, m, f, g, nil, solveOptions{})
}

// solveOptions are the solve's variants beyond plain GPTQ.
type solveOptions struct {
	// weighted: each group's parameters searched under the importances
	// f.Diag (fitWeighted) instead of the plain squared error.
	weighted bool
	// given: the parameters of every group are taken from this result
	// (same shape) instead of being fitted; only the codes are solved.
	given *Result
}

// solve is Solve calling done (if set) after each row panel, once the
// panel's rows are read for the last time (a mapped matrix can then drop
// their pages).
func solve(dst *Result, m quant.Matrix, f *Factor, g Grid, done func(), opt solveOptions) error {
	n, k := m.N, m.K
	gs := g.group(k)
	if f.K != k || len(f.U) != k*k {
		return fmt.Errorf("gptq: factor is for K=%d, matrix is [%d, %d]", f.K, n, k)
	}
	if gs <= 0 || k%gs != 0 {
		return fmt.Errorf("gptq: group size %d does not divide K=%d", gs, k)
	}
	dst.size(n, k, gs, g.Kind.Zeros())
	if opt.given != nil {
		if opt.given.N != n || opt.given.K != k || opt.given.Group != gs {
			return fmt.Errorf("gptq: given parameters are for [%d, %d] g%d, matrix is [%d, %d] g%d", opt.given.N, opt.given.K, opt.given.Group, n, k, gs)
		}
		copy(dst.Scales, opt.given.Scales)
		if dst.Zeros != nil {
			copy(dst.Zeros, opt.given.Zeros)
		}
	}
	rows := max(1, min(n, panelBytes/(4*k)))
	s := &solver{m: m, f: f, g: g, dst: dst, gs: gs, ng: k / gs, group: make([]int, k), sub: subWidth(gs),
		w: make([]float32, rows*k), e: make([]float32, rows*BlockSize), stats: make([]quant.ErrStats, rows),
		given: opt.given != nil}
	if opt.weighted && len(f.Diag) == k {
		s.imp = make([]float32, k) // in processing order
		for i, c := range f.Perm {
			s.imp[i] = f.Diag[c]
		}
	}
	for i, c := range f.Perm {
		if f.Act { // static groups: a column keeps its original group
			s.group[i] = c / gs
		} else { // in processing order, groups are runs
			s.group[i] = i / gs
		}
	}
	for n0 := 0; n0 < n; n0 += rows {
		s.panel(n0, min(n, n0+rows))
		if done != nil {
			done()
		}
	}
	return nil
}

// subBlock is the width of the sub-blocks inside a block: within one,
// each column's error is pushed into the sub-block's later columns one by
// one; the block's later columns get the sub-block's errors with one GEMM.
const subBlock = 16

// subWidth is the sub-block width for groups of gs: a divisor of
// subBlock that also divides gs, so every group boundary starts a
// sub-block and its group's columns are fully updated when it is fitted.
func subWidth(gs int) int {
	w := subBlock
	for gs%w != 0 {
		w /= 2
	}
	return w
}

// solver is one Solve in progress.
type solver struct {
	m     quant.Matrix
	f     *Factor
	g     Grid
	dst   *Result
	gs    int
	ng    int       // groups per row
	group []int     // [K] the group of each column, in processing order
	sub   int       // sub-block width
	w     []float32 // [rows, K] panel in processing order
	e     []float32 // [rows, BlockSize] scaled errors of the current block
	stats []quant.ErrStats
	imp   []float32 // [K] importances in processing order (weighted fits), or nil
	given bool      // the group parameters are given: never fitted
}

// rowChunk is how many rows of a panel run a block's sub-blocks together
// (a variable for the tests): rows are independent inside a block, so each
// chunk runs all of the block's columns and sub-block updates while its
// slice of the panel (rowChunk x BlockSize float32s) stays in cache, rather
// than every sub-block sweeping the whole panel. Each weight sees the same
// operations in the same order whatever the chunk.
var rowChunk = 32

// panel solves rows [n0, n1).
func (s *solver) panel(n0, n1 int) {
	k, p := s.m.K, n1-n0
	kernels.Parallel(p, func(lo, hi int) {
		orig := make([]float32, k)
		for r := lo; r < hi; r++ {
			s.load(n0+r, s.w[r*k:(r+1)*k], orig)
		}
	})
	u := s.f.U
	for i1 := 0; i1 < k; i1 += BlockSize {
		i2 := min(k, i1+BlockSize)
		kernels.Parallel(p, func(lo, hi int) {
			seg := make([]float32, s.gs)
			for c0 := lo; c0 < hi; c0 += rowChunk {
				s.block(n0, c0, min(hi, c0+rowChunk), i1, i2, seg)
			}
		})
		if i2 < k {
			// W[:, i2:] -= E @ U[i1:i2, i2:]
			kernels.Sgemm(false, false, p, k-i2, i2-i1, -1, s.e, BlockSize, u[i1*k+i2:], k, 1, s.w[i2:], k)
		}
	}
	kernels.Parallel(p, func(lo, hi int) {
		orig, deq := make([]float32, k), make([]float32, k)
		for r := lo; r < hi; r++ {
			row := s.m.Row(n0+r, orig)
			s.dst.Dequantize(s.g, n0+r, deq)
			s.stats[r] = quant.Compare(row, deq)
		}
	})
	for r := range p {
		s.dst.Stats.Merge(s.stats[r]) // fixed order: identical on every run
	}
}

// block runs the columns [i1, i2) of panel rows [r0, r1): sub-block by
// sub-block, column by column across the rows (each row's steps depend on
// its previous column, so going across rows gives the CPU independent work
// to overlap), then the sub-block's errors pushed into the block's later
// columns with one GEMM over these rows.
func (s *solver) block(n0, r0, r1, i1, i2 int, seg []float32) {
	k := s.m.K
	for j1 := i1; j1 < i2; j1 += s.sub {
		j2 := min(i2, j1+s.sub)
		for i := j1; i < j2; i++ {
			for r := r0; r < r1; r++ {
				s.column(n0+r, s.w[r*k:(r+1)*k], s.e[r*BlockSize:], i, i1, j2, seg)
			}
		}
		if j2 < i2 {
			// W[r0:r1, j2:i2] -= E[r0:r1, j1:j2] @ U[j1:j2, j2:i2]
			kernels.Sgemm(false, false, r1-r0, i2-j2, j2-j1, -1, s.e[r0*BlockSize+j1-i1:], BlockSize, s.f.U[j1*k+j2:], k, 1, s.w[r0*k+j2:], k)
		}
	}
}

// load fills w with row n in processing order, dead channels zeroed; with
// static groups it fits every group's parameters from that row.
func (s *solver) load(n int, w []float32, buf []float32) {
	row := s.m.Row(n, buf)
	f := s.f
	for _, d := range f.Dead {
		if d {
			row = slices.Clone(row)
			break
		}
	}
	for c, d := range f.Dead {
		if d {
			row[c] = 0
		}
	}
	for i, c := range f.Perm {
		w[i] = row[c]
	}
	if f.Act && !s.given {
		var imp []float32
		if s.imp != nil {
			imp = f.Diag // static groups are fitted in channel order
		}
		for gi := range s.m.K / s.gs {
			lo, hi := gi*s.gs, (gi+1)*s.gs
			s.setParam(n, gi, s.g.fitWeighted(row[lo:hi], sub(imp, lo, hi)))
		}
	}
}

// sub is x[lo:hi], or nil for a nil x.
func sub(x []float32, lo, hi int) []float32 {
	if x == nil {
		return nil
	}
	return x[lo:hi]
}

func (s *solver) setParam(n, gi int, p param) {
	i := n*s.ng + gi
	s.dst.Scales[i] = p.scale
	if s.dst.Zeros != nil {
		s.dst.Zeros[i] = p.zero
	}
}

// column runs column i of row n (w in processing order) in the block
// starting at i1 and the sub-block ending at j2: quantize (fitting the
// group's parameters first at a group boundary without act-order), scale
// the error by 1/U[i,i], push it into the sub-block's later columns and
// keep it in e for the GEMMs that update the rest of the row.
func (s *solver) column(n int, w, e []float32, i, i1, j2 int, seg []float32) {
	k, u := s.m.K, s.f.U
	c, gi := s.f.Perm[i], s.group[i]
	var p param
	if !s.f.Act && !s.given && i == gi*s.gs { // a group's first column
		copy(seg, w[i:i+s.gs])
		p = s.g.fitWeighted(seg, sub(s.imp, i, i+s.gs))
		s.setParam(n, gi, p)
	} else {
		p = s.dst.param(n*s.ng + gi)
	}
	q, v := s.g.code(p, w[i])
	s.dst.Codes[n*k+c] = q
	d := (w[i] - v) / u[i*k+i]
	e[i-i1] = d
	wi := w[i+1 : j2]
	ui := u[i*k+i+1 : i*k+i+1+len(wi)]
	for j := range wi {
		wi[j] -= d * ui[j]
	}
}
