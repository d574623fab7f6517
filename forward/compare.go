package forward

import (
	"fmt"
	"math"
)

// Diff measures an output against a reference, accumulated in float64.
type Diff struct {
	SNR        float64 // dB: 10 log10(sum ref^2 / sum (ref-out)^2); +Inf when equal
	MaxAbsDiff float64
	MaxAbsRef  float64
}

// RelMax is MaxAbsDiff / MaxAbsRef (0 when both are 0).
func (d Diff) RelMax() float64 {
	if d.MaxAbsDiff == 0 {
		return 0
	}
	return d.MaxAbsDiff / d.MaxAbsRef
}

// String is e.g. "SNR 124.3 dB, max|diff| 3.4e-07 (6.4e-07 of max|ref|)".
func (d Diff) String() string {
	return fmt.Sprintf("SNR %.1f dB, max|diff| %.3g (%.3g of max|ref|)", d.SNR, d.MaxAbsDiff, d.RelMax())
}

// Compare measures out against ref (same length, else it panics).
func Compare(ref, out []float32) Diff {
	if len(ref) != len(out) {
		panic(fmt.Sprintf("forward.Compare: %d reference values, %d outputs", len(ref), len(out)))
	}
	var sig, noise float64
	var d Diff
	for i, r := range ref {
		rf, e := float64(r), float64(out[i])-float64(r)
		sig += rf * rf
		noise += e * e
		d.MaxAbsDiff = max(d.MaxAbsDiff, math.Abs(e))
		d.MaxAbsRef = max(d.MaxAbsRef, math.Abs(rf))
	}
	switch {
	case noise == 0:
		d.SNR = math.Inf(1)
	case math.IsNaN(noise):
		d.SNR = math.Inf(-1)
	default:
		d.SNR = 10 * math.Log10(sig/noise)
	}
	return d
}

// ArgMax returns the index of the largest value of row (the first on ties).
func ArgMax(row []float32) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}
