package forward

import (
	"fmt"
	"math"
	"unsafe"
)

// NonFiniteError is the forward's refusal to go on from a NaN or an
// infinity it computed (an overflow of float32 from extreme weights or
// activations): it names the layer, the point and where in it the first
// such value is, so no result carries NaN logits.
type NonFiniteError struct {
	Layer int   // ModelLevel for the head
	Point Point // the first point found non-finite
	Row   int   // the token's row in the call (its position in a prefill)
	Col   int
	Value float32
}

func (e *NonFiniteError) Error() string {
	where := fmt.Sprintf("layer %d", e.Layer)
	if e.Layer == ModelLevel {
		where = "the head"
	}
	return fmt.Sprintf("%s: %v in %s at row %d, column %d: the forward overflowed float32 (extreme weights or activations); no result is given",
		where, e.Value, e.Point, e.Row, e.Col)
}

// CheckFinite is checkFinite for the callers that run a layer's Stages
// themselves (the calibrated builds' true-sequential passes).
func CheckFinite(layer int, p Point, d []float32, cols int) error {
	return checkFinite(layer, p, d, cols)
}

// checkFinite returns a NonFiniteError for the first NaN or Inf of d
// ([rows, cols]), nil when every value is finite. A float32 is non-finite
// when its exponent bits are all ones, so (bits&exp)+lsb carries into the
// sign bit exactly then; eight values are tested per branch.
func checkFinite(layer int, p Point, d []float32, cols int) error {
	const exp, lsb, sign = 0x7f800000, 0x00800000, 0x80000000
	u := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(d))), len(d))
	i := 0
	for ; i+8 <= len(u); i += 8 {
		v := u[i : i+8 : i+8]
		any := (v[0]&exp + lsb) | (v[1]&exp + lsb) | (v[2]&exp + lsb) | (v[3]&exp + lsb) |
			(v[4]&exp + lsb) | (v[5]&exp + lsb) | (v[6]&exp + lsb) | (v[7]&exp + lsb)
		if any&sign != 0 {
			break
		}
	}
	for ; i < len(u); i++ {
		if (u[i]&exp+lsb)&sign != 0 {
			return &NonFiniteError{Layer: layer, Point: p, Row: i / cols, Col: i % cols, Value: math.Float32frombits(u[i])}
		}
	}
	return nil
}

// firstNonFinite checks the points in order and returns the first error.
func firstNonFinite(layer int, checks ...pointData) error {
	for _, c := range checks {
		if err := checkFinite(layer, c.p, c.d, c.cols); err != nil {
			return err
		}
	}
	return nil
}

type pointData struct {
	p    Point
	d    []float32
	cols int
}
