package gptq

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"sparkconv/calib"
	"sparkconv/kernels"
)

// HoldOut: every HoldOut-th token row of a linear input is kept out of its
// Hessian and used to measure the output error on rows the solve never saw.
const HoldOut = 10

// maxHeldRows bounds the held-out rows kept per input (the report's error
// estimate needs a few hundred, not all).
const maxHeldRows = 1024

// gatherRows: rows are gathered into runs this long before they are added
// to a Hessian (each addition reads and writes all of H in float64: for
// down_proj's 6656^2 that costs more than the products of a short chunk).
const gatherRows = 512

// newHessian is the accumulator of a solve's input with k channels: every
// HoldOut-th row held out, the rest added in runs of gatherRows.
func newHessian(k int) *calib.Hessian {
	h := calib.NewHessian(k)
	h.HoldOut, h.MaxHeld, h.Gather = HoldOut, maxHeldRows, gatherRows
	return h
}

// DefaultDamp is the damping fraction of the mean diagonal (--damp):
// IST-DASLab's and llm-compressor's 0.01. On the real model's W4A16 the
// mean KLD rises with damping (0.003: 0.0793, 0.01: 0.0809, 0.1: 0.0868;
// docs/calibration.md#damping-and-the-retry-rule).
const DefaultDamp = 0.01

// DefaultRefit is the refit's sweeps (--refit): on the real model's W4A16
// (group 64, with the weighted search) 3 sweeps take the mean KLD on
// testdata/real/heldout.txt from 0.0705 to 0.0657
// (docs/calibration.md#weighted-search-and-refit).
const DefaultRefit = 3

// DefaultRefitRounds4 is the 4-bit formats' --refit-rounds: with the
// float target a second solve of the codes for the refitted parameters
// takes the real model's W4A16 from 0.0431 to 0.0423 on heldout.txt and
// from 0.0624 to 0.0605 on heldout-agent.txt
// (docs/calibration.md#float-target-on-the-real-model).
const DefaultRefitRounds4 = 2

// ErrNotPD reports a Hessian that stays singular after every damping tried.
var ErrNotPD = errors.New("Hessian not positive definite at any damping tried")

// dampSchedule is the damping tried after the requested one fails: each
// step multiplies it by about 3, up to the whole mean diagonal.
func dampSchedule(d float64) []float64 {
	out := []float64{d}
	for x := d * math.Sqrt(10); x < 1; x *= math.Sqrt(10) {
		out = append(out, x)
	}
	if out[len(out)-1] < 1 {
		out = append(out, 1)
	}
	return out
}

// Factor is what the solve needs from a Hessian: the upper triangular U
// with U^T U = (H + damp I)^-1, in processing order, computed in float64
// and rounded once to float32.
type Factor struct {
	K    int
	U    []float32 // [K, K] row-major, zero below the diagonal
	work []float64 // Prepare's float64 scratch, dropped once U is made
	Perm []int     // Perm[i] is the input channel processed i-th
	Dead []bool    // input channels with diag H = 0 (their weights become 0)
	// Diag is diag(H) before damping, in channel order: each input
	// channel's importance (the sum of its squared activations).
	Diag []float32
	// Damp is the damping fraction that factored; Tries how many were tried.
	Damp  float64
	Tries int
	Act   bool // columns in descending diag(H) order (static act-order)
}

// Prepare factors h (full symmetric [k, k], not modified) into f, reusing
// f's memory: dead channels (diag 0) get H[d,d] = 1, the order is
// descending diag(H) when actOrder (stable: ties keep channel order),
// damping damp * mean(diag) is added, and U = chol(H^-1) upper. A Hessian
// that is not positive definite is retried with about 3x the damping each
// time, up to the mean diagonal itself; ErrNotPD when none factors.
func Prepare(f *Factor, h []float64, k int, damp float64, actOrder bool) error {
	if len(h) < k*k {
		return fmt.Errorf("gptq: Hessian holds %d values, want %d", len(h), k*k)
	}
	f.K, f.Act = k, actOrder
	f.Dead = slices.Grow(f.Dead[:0], k)[:k]
	f.Perm = slices.Grow(f.Perm[:0], k)[:k]
	f.Diag = slices.Grow(f.Diag[:0], k)[:k]
	diag := make([]float64, k)
	var mean float64
	for i := range k {
		d := h[i*k+i]
		f.Diag[i] = float32(d)
		f.Dead[i] = d == 0
		if d == 0 {
			d = 1
		}
		diag[i] = d
		mean += d
	}
	mean /= float64(k)
	for i := range f.Perm {
		f.Perm[i] = i
	}
	if actOrder {
		slices.SortStableFunc(f.Perm, func(a, b int) int {
			switch {
			case diag[a] > diag[b]:
				return -1
			case diag[a] < diag[b]:
				return 1
			}
			return 0
		})
	}
	f.work = slices.Grow(f.work[:0], k*k)[:k*k]
	for t, d := range dampSchedule(damp) {
		f.Tries = t + 1
		kernels.Parallel(k, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				src, dst := h[f.Perm[i]*k:], f.work[i*k:(i+1)*k]
				for j, pj := range f.Perm {
					dst[j] = src[pj]
				}
				dst[i] = diag[f.Perm[i]] + d*mean
			}
		})
		if err := kernels.CholeskyUpperInverse(f.work, k); err == nil {
			f.Damp = d
			f.U = slices.Grow(f.U[:0], k*k)[:k*k]
			kernels.Parallel(k, func(lo, hi int) {
				for i, v := range f.work[lo*k : hi*k] {
					f.U[lo*k+i] = float32(v)
				}
			})
			// The float64 scratch is the largest buffer of a solve (354 MB
			// at K = 6656): not held through the solve that follows.
			f.work = nil
			return nil
		}
	}
	f.Damp, f.U, f.work = 0, f.U[:0], nil
	return ErrNotPD
}
