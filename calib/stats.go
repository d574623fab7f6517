package calib

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"sparkconv/dtype"
	"sparkconv/forward"
	"sparkconv/kernels"
	"sparkconv/safetensors"
)

// Range is the extent of one intermediate tensor over every calibration
// token (for Scores and Probs: over the entries a query may see).
type Range struct {
	Min    float32 `json:"min"`
	Max    float32 `json:"max"`
	AbsMax float32 `json:"absmax"`
	// bad counts NaN/Inf values (a broken checkpoint); seen is set once
	// a value was added.
	bad  int64
	seen bool
}

func (r *Range) merge(o Range) {
	if !o.seen {
		r.bad += o.bad
		return
	}
	if !r.seen {
		o.bad += r.bad
		*r = o
		return
	}
	r.Min, r.Max = min(r.Min, o.Min), max(r.Max, o.Max)
	r.AbsMax = max(r.AbsMax, o.AbsMax)
	r.bad += o.bad
}

// rangeOf measures data on all cores, skipping (and counting) NaN and Inf.
func rangeOf(data []float32) Range {
	const grain = 1 << 16
	var mu sync.Mutex
	var total Range
	kernels.Parallel((len(data)+grain-1)/grain, func(lo, hi int) {
		r := extent(data[lo*grain : min(hi*grain, len(data))])
		mu.Lock()
		total.merge(r)
		mu.Unlock()
	})
	return total
}

// extent is the serial range of d. NaN and Inf (all exponent bits set)
// are found by an integer test, which keeps the loop cheap (~2 ns a value).
func extent(d []float32) Range {
	const expMask = 0x7f800000
	lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
	var bad int64
	for _, v := range d {
		if math.Float32bits(v)&expMask == expMask {
			bad++
			continue
		}
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	if lo > hi { // nothing finite
		return Range{bad: bad}
	}
	return Range{Min: lo, Max: hi, AbsMax: max(-lo, hi), bad: bad, seen: true}
}

// HeadModule names the output head's input statistics (tied or not).
const HeadModule = "lm_head"

// inputAcc accumulates one linear input: per-channel extent and mean square
// beside its Hessian.
type inputAcc struct {
	prefix         string // tensor name prefix, e.g. model.layers.0.mlp.down_proj.input
	n              int
	absmax, lo, hi []float32
	sumsq          []float64
	hess           *Hessian // every row added as it comes
}

func newInputAcc(n int) *inputAcc {
	return &inputAcc{n: n, absmax: make([]float32, n), lo: make([]float32, n), hi: make([]float32, n),
		sumsq: make([]float64, n), hess: NewHessian(n)}
}

// reset empties the accumulator for a new input, keeping its memory.
func (a *inputAcc) reset(prefix string) {
	a.prefix = prefix
	clear(a.absmax)
	clear(a.sumsq)
	a.hess.Reset()
	for c := range a.lo {
		a.lo[c], a.hi[c] = float32(math.Inf(1)), float32(math.Inf(-1))
	}
}

// add accumulates x [rows, n].
func (a *inputAcc) add(x []float32, rows int) {
	n := a.n
	kernels.Parallel(n, func(c0, c1 int) {
		lo, hi, sq := a.lo[c0:c1], a.hi[c0:c1], a.sumsq[c0:c1]
		for r := range rows {
			row := x[r*n+c0 : r*n+c1]
			for k, v := range row {
				if v < lo[k] {
					lo[k] = v
				}
				if v > hi[k] {
					hi[k] = v
				}
				sq[k] += float64(v) * float64(v)
			}
		}
		for k := range lo {
			a.absmax[c0+k] = max(-lo[k], hi[k])
		}
	})
	a.hess.Add(x, rows) // mirrored once, when written
}

// Tensor name suffixes of a linear input's statistics.
const (
	SuffixAbsMax  = ".absmax"
	SuffixMin     = ".min"
	SuffixMax     = ".max"
	SuffixMeanSq  = ".mean_sq"
	SuffixHessian = ".hessian"
	SuffixTokens  = ".tokens"
)

// tensors returns the accumulator's statistics to write. The Hessian is
// converted into buf (grown as needed and reused from tensor to tensor:
// the writer produces one tensor at a time), so writing 28 layers does not
// allocate and fault in 6 GB of fresh pages.
func (a *inputAcc) tensors(buf *[]byte) []safetensors.Tensor {
	n := int64(a.n)
	meanSq := make([]float32, a.n)
	tokens := a.hess.Tokens
	for c, s := range a.sumsq {
		meanSq[c] = float32(s / float64(max(tokens, 1)))
	}
	return []safetensors.Tensor{
		forward.F32Tensor(a.prefix+SuffixAbsMax, a.absmax, n),
		forward.F32Tensor(a.prefix+SuffixMin, a.lo, n),
		forward.F32Tensor(a.prefix+SuffixMax, a.hi, n),
		forward.F32Tensor(a.prefix+SuffixMeanSq, meanSq, n),
		{Name: a.prefix + SuffixHessian, DType: dtype.F32, Shape: []int64{n, n}, Produce: func() ([]byte, error) {
			h := a.hess.H
			if cap(*buf) < 4*len(h) {
				*buf = make([]byte, 4*len(h))
			}
			b := (*buf)[:4*len(h)]
			a.hess.Finish()
			for k, v := range h {
				binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(float32(v)))
			}
			return b, nil
		}},
		{Name: a.prefix + SuffixTokens, DType: dtype.I64, Shape: []int64{1}, Produce: func() ([]byte, error) {
			return binary.LittleEndian.AppendUint64(nil, uint64(tokens)), nil
		}},
	}
}

// info describes the accumulator for the summary.
func (a *inputAcc) info(file string, layer int, p forward.Point, readers []string) InputInfo {
	var am float32
	for _, v := range a.absmax {
		am = max(am, v)
	}
	return InputInfo{Name: a.prefix, File: file, Layer: layer, Point: p.String(), Modules: readers,
		Channels: a.n, Tokens: a.hess.Tokens, AbsMax: am}
}

// observer collects one layer's (or the head's) ranges and linear inputs.
type observer struct {
	layer  int
	ranges map[forward.Point]*Range
	inputs map[forward.Point]*inputAcc
	err    error
}

func newObserver(layer int) *observer {
	return &observer{layer: layer, ranges: map[forward.Point]*Range{}, inputs: map[forward.Point]*inputAcc{}}
}

// Observe implements forward.Observer.
func (o *observer) Observe(layer int, p forward.Point, data []float32, cols int) {
	if layer != o.layer && o.err == nil {
		o.err = fmt.Errorf("calibration observer for layer %d saw layer %d", o.layer, layer)
	}
	r := o.ranges[p]
	if r == nil {
		r = &Range{}
		o.ranges[p] = r
	}
	r.merge(rangeOf(data))
	if a := o.inputs[p]; a != nil {
		a.add(data, len(data)/cols)
	}
}

// rangeMap returns the ranges by point name, failing on non-finite values.
func (o *observer) rangeMap(where string) (map[string]Range, error) {
	out := map[string]Range{}
	for p, r := range o.ranges {
		if r.bad > 0 {
			return nil, fmt.Errorf("%s: %s holds %d NaN/Inf values", where, p, r.bad)
		}
		out[p.String()] = *r
	}
	return out, o.err
}
