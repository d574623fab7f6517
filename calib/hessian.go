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
	seen     int64 // rows offered, held-out ones included
	buf      []float32
}

// NewHessian returns an empty accumulator for k input channels that adds
// every row to H as it comes.
func NewHessian(k int) *Hessian { return &Hessian{K: k, H: make([]float64, k*k)} }

// Reset empties the accumulator, keeping its memory.
func (h *Hessian) Reset() {
	clear(h.H)
	clear(h.AbsMax)
	h.Tokens, h.seen, h.Held, h.buf = 0, 0, h.Held[:0], h.buf[:0]
}

// HeldRows is the number of held-out rows.
func (h *Hessian) HeldRows() int { return len(h.Held) / h.K }

// Add accumulates x [rows, K].
func (h *Hessian) Add(x []float32, rows int) {
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
	if h.HoldOut == 0 && len(h.buf) == 0 && rows >= h.Gather {
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
	}
	h.seen += int64(rows)
	if len(h.buf)/k >= h.Gather {
		h.flush()
	}
}

func (h *Hessian) flush() {
	if n := len(h.buf) / h.K; n > 0 {
		kernels.SyrkAccumulateLower(h.H, h.buf, n, h.K)
		h.Tokens += int64(n)
	}
	h.buf = h.buf[:0]
}

// Finish adds the pending rows and mirrors the lower triangle: H is then
// the full symmetric matrix.
func (h *Hessian) Finish() {
	h.flush()
	kernels.SymmetrizeLower(h.H, h.K)
}
