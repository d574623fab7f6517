package quant

import (
	"math"
	"testing"
)

// TestSmoothScales: the rule, its clamp and the dead channels, on values
// worked by hand.
func TestSmoothScales(t *testing.T) {
	for _, tc := range []struct {
		name      string
		act, wmax []float64
		alpha     float64
		want      []float64
	}{
		{"alpha half: sqrt(a/w)", []float64{4, 9, 1}, []float64{1, 1, 4}, 0.5, []float64{2, 3, 0.5}},
		{"alpha 0.3", []float64{8}, []float64{2}, 0.3, []float64{math.Pow(8, 0.3) / math.Pow(2, 0.7)}},
		{"tiny activation clamped", []float64{1e-30}, []float64{1}, 0.5, []float64{SmoothMinScale}},
		{"dead input keeps 1", []float64{0, 2}, []float64{3, 0}, 0.5, []float64{1, 1}},
		{"empty", nil, nil, 0.5, []float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SmoothScales(tc.act, tc.wmax, tc.alpha)
			if len(got) != len(tc.want) {
				t.Fatalf("%d scales, want %d", len(got), len(tc.want))
			}
			for j := range got {
				if got[j] != tc.want[j] {
					t.Errorf("s[%d] = %g, want %g", j, got[j], tc.want[j])
				}
			}
		})
	}
}

// TestColumnAbsMax: the maxima over every row of every weight folded in.
func TestColumnAbsMax(t *testing.T) {
	for _, tc := range []struct {
		name string
		ws   [][]float32 // each [*, 3]
		want []float64
	}{
		{"one weight", [][]float32{{1, -5, 0, -2, 3, 0}}, []float64{2, 5, 0}},
		{"two weights", [][]float32{{1, -5, 0}, {0, 1, -7, 4, 0, 0}}, []float64{4, 5, 7}},
		{"none", nil, []float64{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]float64, 3)
			for _, w := range tc.ws {
				ColumnAbsMax(got, w)
			}
			for j := range got {
				if got[j] != tc.want[j] {
					t.Errorf("max[%d] = %g, want %g", j, got[j], tc.want[j])
				}
			}
		})
	}
}

// TestScaleColumns: column c times s[c], on a matrix tall enough to split
// across workers.
func TestScaleColumns(t *testing.T) {
	for _, rows := range []int{1, 2, 1000} {
		w := make([]float32, rows*3)
		for i := range w {
			w[i] = float32(i%7) - 3
		}
		s := []float32{2, 0.5, -1}
		got := append([]float32(nil), w...)
		ScaleColumns(got, s)
		for i, v := range w {
			if want := v * s[i%3]; got[i] != want {
				t.Fatalf("rows %d: w[%d] = %g, want %g", rows, i, got[i], want)
			}
		}
	}
}
