package forward

import (
	"fmt"
	"math"
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

// checkFinite returns a NonFiniteError for the first NaN or Inf of d
// ([rows, cols]), nil when every value is finite.
func checkFinite(layer int, p Point, d []float32, cols int) error {
	for i, v := range d {
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
			return &NonFiniteError{Layer: layer, Point: p, Row: i / cols, Col: i % cols, Value: v}
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
