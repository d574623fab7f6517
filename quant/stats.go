package quant

import (
	"math"
	"strconv"
)

// ErrStats accumulates how well approx reproduces ref over some values.
// All sums are float64. Merging in a fixed order gives identical results on
// every run.
type ErrStats struct {
	Count    int64   // number of values
	SumSq    float64 // Σ ref²
	SumErrSq float64 // Σ (ref - approx)²
	MaxAbs   float64 // max |ref - approx|
}

// Merge adds o's values to s.
func (s *ErrStats) Merge(o ErrStats) {
	s.Count += o.Count
	s.SumSq += o.SumSq
	s.SumErrSq += o.SumErrSq
	s.MaxAbs = max(s.MaxAbs, o.MaxAbs)
}

// SNRdB is 10*log10(Σ ref² / Σ err²): +Inf when the reproduction is exact,
// NaN when there is neither signal nor error, -Inf for error without signal.
func (s ErrStats) SNRdB() float64 { return snr(s.SumSq, s.SumErrSq) }

// MSE is the mean squared error (0 for no values).
func (s ErrStats) MSE() float64 {
	if s.Count == 0 {
		return 0
	}
	return s.SumErrSq / float64(s.Count)
}

func snr(sig, noise float64) float64 {
	if noise == 0 {
		if sig == 0 {
			return math.NaN()
		}
		return math.Inf(1)
	}
	return 10 * math.Log10(sig/noise)
}

// Compare computes the error statistics of approx against ref in float64.
// It panics if the lengths differ.
func Compare(ref, approx []float32) ErrStats {
	if len(ref) != len(approx) {
		panic("quant.Compare: length mismatch")
	}
	s := ErrStats{Count: int64(len(ref))}
	for i, r := range ref {
		rf := float64(r)
		d := rf - float64(approx[i])
		s.SumSq += rf * rf
		s.SumErrSq += d * d
		s.MaxAbs = max(s.MaxAbs, math.Abs(d))
	}
	return s
}

// SNRdB is 10*log10(Σ ref² / Σ (ref-approx)²) in float64, +Inf when approx
// equals ref exactly (NaN when both are all zero).
func SNRdB(ref, approx []float32) float64 { return Compare(ref, approx).SNRdB() }

// MaxAbsErr is max |ref - approx| in float64.
func MaxAbsErr(ref, approx []float32) float64 { return Compare(ref, approx).MaxAbs }

// blockStats accumulates, for one group or row, Σ x², Σ (x - v)² and
// max |x - v| of values x and their dequantized values v. Grid kernels feed
// it 16 values at a time as float32 partial sums (2 lanes of 8), which keeps
// the float32 rounding of the sums below 1e-6 relative; blocks add up in
// float64.
type blockStats struct {
	sumSq, sumErr float64
	maxBits       uint32 // absBits of the largest |x - v|
}

func (b *blockStats) flush(s0, s1, e0, e1 float32) {
	b.sumSq += float64(s0 + s1)
	b.sumErr += float64(e0 + e1)
}

// one adds a single value (for tails shorter than a block).
func (b *blockStats) one(x, v float32) {
	d := x - v
	b.sumSq += float64(x) * float64(x)
	b.sumErr += float64(d) * float64(d)
	b.maxBits = max(b.maxBits, absBits(d))
}

func (b *blockStats) stats(n int) ErrStats {
	return ErrStats{Count: int64(n), SumSq: b.sumSq, SumErrSq: b.sumErr,
		MaxAbs: float64(math.Float32frombits(b.maxBits))}
}

// DB is a decibel figure as it appears in JSON reports: a number when
// finite, null when infinite (an exact reproduction: no error at all) or
// undefined (neither signal nor error), which JSON numbers cannot express.
// Reports pair a null with "exact": true where the reproduction was exact.
type DB float64

// MarshalJSON writes the number, or null when it is not finite.
func (d DB) MarshalJSON() ([]byte, error) {
	f := float64(d)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON reads a number, or null as +Inf (what reports write for an
// exact reproduction).
func (d *DB) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*d = DB(math.Inf(1))
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return err
	}
	*d = DB(f)
	return nil
}

// Number is a ratio or error figure in JSON: the number when finite, null
// when it is not (a relative error of 0/0 when the reference is all zero).
type Number float64

// MarshalJSON writes the number, or null when it is not finite.
func (n Number) MarshalJSON() ([]byte, error) { return DB(n).MarshalJSON() }
