package keepfloat

import (
	"fmt"

	"sparkconv/convert"
	"sparkconv/dtype"
	"sparkconv/forward"
)

// rule is how the target format quantizes one linear, as the format
// itself says: its grid (convert.Format.Grid, rounded to nearest) and its
// runtime's input rule (convert.Format.InputAct).
type rule struct {
	Name string
	Grid convert.GridSpec
	Act  forward.Act
}

// ruleOf is format f's rule for a model of activation dtype act.
func ruleOf(f convert.Format, act dtype.DType) rule {
	return rule{Name: f.Name(), Grid: f.Grid(act), Act: f.InputAct(act)}
}

func (f rule) describe() string {
	g := "int8 per channel, round to nearest"
	if f.Grid.Kind != convert.GridInt8 {
		params := "MSE-searched scales"
		if !f.Grid.Search {
			params = "plain scales"
		}
		g = fmt.Sprintf("%s group %d, %s, round to nearest", f.Grid.Kind, f.Grid.Group, params)
	}
	return g + "; inputs " + f.Act.String()
}

// quantize returns the dequantized round-to-nearest weights of w [n, k].
func (f rule) quantize(w []float32, n, k int) ([]float32, error) {
	return f.Grid.RoundTrip(w, n, k)
}
