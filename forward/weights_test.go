package forward

import (
	"slices"
	"testing"

	"sparkconv/dtype"
)

// TestActApply checks the activation rules on rows whose answers are
// worked out by hand: amax 127 gives scale 1, so the codes are the rounded
// values; halves separate vLLM's std::round from half-to-even.
func TestActApply(t *testing.T) {
	x := []float32{127, -2.5, 3.5, 0.5, -0.5, 10.4, 0, 0, 0, 0, 0, 0}
	cases := []struct {
		act  Act
		want []float32
	}{
		{Act{}, x},
		{Act{DType: dtype.BF16}, []float32{127, -2.5, 3.5, 0.5, -0.5, 10.375, 0, 0, 0, 0, 0, 0}},
		{Act{Int8: Int8VLLMRow}, []float32{127, -3, 4, 1, -1, 10, 0, 0, 0, 0, 0, 0}},
		{Act{Int8: Int8Dynamic}, []float32{127, -2, 4, 0, 0, 10, 0, 0, 0, 0, 0, 0}},
		{Act{DType: dtype.BF16, Int8: Int8VLLMRow}, []float32{127, -3, 4, 1, -1, 10, 0, 0, 0, 0, 0, 0}},
	}
	for _, c := range cases {
		got := make([]float32, len(x))
		c.act.Apply(got, x, 6)
		if !slices.Equal(got, c.want) {
			t.Errorf("%v: %v, want %v", c.act, got, c.want)
		}
	}
	// a scale that is not 1: amax 2.54 -> scale 0.02, 1.0 -> code 50
	got := make([]float32, 2)
	Act{Int8: Int8Dynamic}.Apply(got, []float32{2.54, 1.0}, 2)
	if s := float32(2.54) / 127; got[0] != 127*s || got[1] != float32(50)*s {
		t.Errorf("scaled row %v", got)
	}
}
