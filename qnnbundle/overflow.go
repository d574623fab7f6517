package qnnbundle

import (
	"fmt"
	"math"
	"sort"

	"sparkconv/onnxeval"
	"sparkconv/onnxgraph"
	"sparkconv/qnn"
)

// Overflow is an activation tensor whose held-out values went past the
// range its encoding holds: a value there saturates at the grid's end.
type Overflow struct {
	Tensor string `json:"tensor"`
	// Times is the farthest held-out value over the encoded range's end on
	// its side (2: twice the encoded maximum, or twice the minimum); Value
	// that value, at position Pos of held-out sequence Seq (an index into
	// calibration.held_out_sequences).
	Times float64 `json:"times"`
	Value float64 `json:"value"`
	Seq   int     `json:"sequence"`
	Pos   int     `json:"position"`
	// Encoded is the range the encoding holds.
	Encoded [2]float64 `json:"encoded_range"`
}

// MaxOverflows is how many overflowing tensors a graph's entry lists.
const MaxOverflows = 5

// Overflowed is how far past its range's end (a share of it) a value must
// go to count: a bounded tensor (a Softmax output at 1.0) reaches its end
// within float rounding.
const Overflowed = 1e-3

// EncodedRange is the range a per-tensor encoding's grid holds:
// [offset*scale, (offset+2^bw-1)*scale]; ok is false for a per-channel one.
func EncodedRange(e qnn.Encoding) (r [2]float64, ok bool) {
	if len(e.Scale) != 1 || len(e.Offset) != 1 {
		return r, false
	}
	s, off := float64(e.Scale[0]), float64(e.Offset[0])
	return [2]float64{off * s, (off + math.Exp2(float64(e.BW)) - 1) * s}, true
}

// overflowScan follows, per tensor, the held-out value farthest past its
// encoded range.
type overflowScan struct {
	enc   map[string][2]float64
	skip  map[string]bool
	worst map[string]*Overflow
}

func newOverflowScan(enc *qnn.Encodings, skip map[string]bool) *overflowScan {
	s := &overflowScan{enc: map[string][2]float64{}, skip: skip, worst: map[string]*Overflow{}}
	for _, a := range enc.Activations {
		if r, ok := EncodedRange(a); ok && !skip[a.Name] {
			s.enc[a.Name] = r
		}
	}
	return s
}

// add checks the values v of tensor name at position pos of sequence seq.
func (s *overflowScan) add(name string, v []float32, seq, pos int) {
	r, ok := s.enc[name]
	if !ok {
		return
	}
	times, val := 1.0, 0.0
	for _, x := range v {
		f := float64(x)
		var t float64
		switch {
		case f > r[1] && r[1] > 0:
			t = f / r[1]
		case f < r[0] && r[0] < 0:
			t = f / r[0]
		default:
			continue
		}
		if t > times {
			times, val = t, f
		}
	}
	if times <= 1+Overflowed {
		return
	}
	if w := s.worst[name]; w == nil || times > w.Times {
		s.worst[name] = &Overflow{Tensor: name, Times: round3(times), Value: round3(val), Seq: seq, Pos: pos, Encoded: [2]float64{round3(r[0]), round3(r[1])}}
	}
}

// result is the n tensors farthest past their ranges, farthest first (ties
// by name), and how many tensors went past theirs at all.
func (s *overflowScan) result(n int) ([]Overflow, int) {
	all := make([]Overflow, 0, len(s.worst))
	for _, w := range s.worst {
		all = append(all, *w)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Times != all[j].Times {
			return all[i].Times > all[j].Times
		}
		return all[i].Tensor < all[j].Tensor
	})
	count := len(all)
	if len(all) > n {
		all = all[:n]
	}
	return all, count
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// Overflows runs the float graph g on the held-out samples and returns the
// activation tensors whose values went farthest past their encodings in
// enc (at most MaxOverflows) and how many went past at all. The inputs in
// fixed (the attention mask, saturated to its encoding on purpose) are fed
// clamped to their ranges, as calibration feeds them, and not checked.
func Overflows(g *onnxeval.Graph, e onnxgraph.GraphEntry, enc *qnn.Encodings, held Samples, fixed qnn.Ranges) ([]Overflow, int, error) {
	skip := map[string]bool{}
	for name := range fixed {
		skip[name] = true
	}
	scan := newOverflowScan(enc, skip)
	err := held(func(s Sample) error {
		_, err := g.Run(feeds(s, fixed), func(name string, v onnxeval.Value) {
			if v.F != nil {
				scan.add(name, v.F, s.Seq, s.Pos)
			}
		})
		if err != nil {
			return fmt.Errorf("%s: held-out sequence %d, position %d: %w", e.File, s.Seq, s.Pos, err)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	list, n := scan.result(MaxOverflows)
	return list, n, nil
}
