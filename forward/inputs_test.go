package forward

import (
	"slices"
	"testing"

	"sparkconv/spark"
)

// TestLinearInputs: every quantized linear reads exactly one input of the
// table, and only g_proj stays float among the readers.
func TestLinearInputs(t *testing.T) {
	var quant, float []string
	for _, in := range LinearInputs {
		quant = append(quant, in.QuantReaders()...)
		float = append(float, in.FloatReaders()...)
		for _, r := range in.Readers {
			var l Layer
			if got, ok := InputOf(r); !ok || got.Point != in.Point || l.Linear(r) == nil {
				t.Errorf("%s: InputOf %v %v, Linear %v", r, got.Point, ok, l.Linear(r))
			}
		}
	}
	if !slices.Equal(quant, spark.QuantLinears) || !slices.Equal(float, []string{spark.GateProj}) {
		t.Errorf("quantized readers %v (want %v), float readers %v", quant, spark.QuantLinears, float)
	}
	if _, ok := InputOf(spark.InputNorm); ok {
		t.Error("input_layernorm reads no linear input")
	}
}
