package calib

import (
	"math"

	"sparkconv/kernels"
)

// Hessian accumulates one linear input: H = sum of x x^T over its token
// rows (lower triangle while accumulating, float64; full and symmetric
// after Finish). It is the one accumulator of the calibration statistics
// (calibrate's files, Run) and of GPTQ's solve (package gptq).
//
// With HoldOut set, every HoldOut-th row (counted over all calls) is kept
// out of H in Held instead, up to MaxHeld rows (once Held is full, they go
// into H like the others). With Gather set, rows are collected into runs of at least Gather
// rows before they are added to H: each addition reads and writes all of H
// in float64, which for a wide input costs more than the products of a
// short chunk. Without either, each Add's rows are added to H at once.
type Hessian struct {
	K       int
	H       []float64 // [K, K]; full and symmetric after Finish
	Tokens  int64     // rows in H
	Held    []float32 // [HeldRows, K] rows kept out of H
	HoldOut int       // every HoldOut-th row goes to Held (0: none)
	MaxHeld int       // most rows kept in Held
	Gather  int       // rows gathered before they are added to H (0: none)
	// AbsMax is max |x| per channel over every row, when TrackMax (for
	// SmoothQuant).
	AbsMax   []float32
	TrackMax bool
	// Cross is the sum of (ref - x)^T x over the rows in H, [K, K]
	// row-major float32 (Cross[a*K+b] sums (ref-x)[a] x[b]), when rows come
	// with a reference through AddRef: the float model's input to the same
	// linear beside the quantized model's (GPTQ's float target, package
	// gptq). Held-out rows are left out of it as they are out of H. It is
	// float32, unlike H: it enters the solve only through a target scaled
	// by its weight, and at K = 6656 float64 would cost 177 MB more.
	Cross  []float32
	seen   int64 // rows offered, held-out ones included
	buf    []float32
	refBuf []float32 // the reference rows beside buf (AddRef)
}

// NewHessian returns an empty accumulator for k input channels that adds
// every row to H as it comes.
func NewHessian(k int) *Hessian { return &Hessian{K: k, H: make([]float64, k*k)} }

// Reset empties the accumulator, keeping its memory.
func (h *Hessian) Reset() {
	clear(h.H)
	clear(h.AbsMax)
	clear(h.Cross)
	h.Tokens, h.seen, h.Held, h.buf, h.refBuf = 0, 0, h.Held[:0], h.buf[:0], h.refBuf[:0]
}

// HeldRows is the number of held-out rows.
func (h *Hessian) HeldRows() int { return len(h.Held) / h.K }

// Add accumulates x [rows, K].
func (h *Hessian) Add(x []float32, rows int) { h.add(x, nil, rows) }

// AddRef accumulates x [rows, K] into H and (ref - x)^T x into Cross:
// ref [rows, K] is the reference input of the same rows (the float
// model's, where x is the quantized model's). A Hessian takes rows either
// all with a reference or all without.
func (h *Hessian) AddRef(x, ref []float32, rows int) {
	if len(h.Cross) != h.K*h.K {
		h.Cross = make([]float32, h.K*h.K)
	}
	h.add(x, ref, rows)
}

func (h *Hessian) add(x, ref []float32, rows int) {
	k := h.K
	if h.TrackMax {
		if len(h.AbsMax) != k {
			h.AbsMax = make([]float32, k)
		}
		for r := range rows {
			for c, v := range x[r*k : (r+1)*k] {
				h.AbsMax[c] = max(h.AbsMax[c], float32(math.Abs(float64(v))))
			}
		}
	}
	if h.HoldOut == 0 && len(h.buf) == 0 && rows >= h.Gather && ref == nil {
		kernels.SyrkAccumulateLower(h.H, x, rows, k)
		h.Tokens += int64(rows)
		h.seen += int64(rows)
		return
	}
	for r := range rows {
		row := x[r*k : (r+1)*k]
		if h.HoldOut > 0 && (h.seen+int64(r))%int64(h.HoldOut) == int64(h.HoldOut-1) && len(h.Held) < h.MaxHeld*k {
			h.Held = append(h.Held, row...)
			continue
		}
		h.buf = append(h.buf, row...)
		if ref != nil {
			h.refBuf = append(h.refBuf, ref[r*k:(r+1)*k]...)
		}
	}
	h.seen += int64(rows)
	if len(h.buf)/k >= h.Gather {
		h.flush()
	}
}

func (h *Hessian) flush() {
	if n := len(h.buf) / h.K; n > 0 {
		kernels.SyrkAccumulateLower(h.H, h.buf, n, h.K)
		if len(h.refBuf) == len(h.buf) {
			h.addCross(n)
		}
		h.Tokens += int64(n)
	}
	h.buf, h.refBuf = h.buf[:0], h.refBuf[:0]
}

// addCross adds (refBuf - buf)^T buf of the n gathered rows to Cross
// (refBuf is overwritten).
func (h *Hessian) addCross(n int) {
	k := h.K
	d := h.refBuf[:n*k]
	for i, v := range h.buf[:n*k] {
		d[i] -= v
	}
	kernels.Sgemm(true, false, k, k, n, 1, d, k, h.buf, k, 1, h.Cross, k)
}

// Finish adds the pending rows and mirrors the lower triangle: H is then
// the full symmetric matrix.
func (h *Hessian) Finish() {
	h.flush()
	kernels.SymmetrizeLower(h.H, h.K)
}
