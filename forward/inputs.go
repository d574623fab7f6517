package forward

import (
	"slices"

	"sparkconv/spark"
)

// LinearInput is a point of a layer that linear modules read: the one
// table of which linear reads which activation, for calibration's
// statistics, GPTQ's Hessians and order, SmoothQuant and the rotation.
type LinearInput struct {
	Point   Point
	Readers []string // the spark modules that read it; the first names its statistics
	Norm    string   // the norm whose output it is ("": not a norm's output)
}

// LinearInputs are the four distinct linear inputs of a layer, in
// computation order. g_proj reads the input norm beside q_k_v_proj and
// stays float (it is not one of spark.QuantLinears).
var LinearInputs = []LinearInput{
	{AttnNorm, []string{spark.QKV, spark.GateProj}, spark.InputNorm},
	{AttnGated, []string{spark.OProj}, ""},
	{MLPNorm, []string{spark.MLPGate, spark.MLPUp}, spark.PostNorm},
	{MLPAct, []string{spark.MLPDown}, ""},
}

// QuantReaders are the input's readers that are quantized
// (spark.QuantLinears), in table order.
func (in LinearInput) QuantReaders() []string { return in.readers(true) }

// FloatReaders are the input's readers that stay float.
func (in LinearInput) FloatReaders() []string { return in.readers(false) }

func (in LinearInput) readers(quantized bool) []string {
	var out []string
	for _, r := range in.Readers {
		if slices.Contains(spark.QuantLinears, r) == quantized {
			out = append(out, r)
		}
	}
	return out
}

// InputOf returns the input that module (a spark module of a layer) reads.
func InputOf(module string) (LinearInput, bool) {
	for _, in := range LinearInputs {
		if slices.Contains(in.Readers, module) {
			return in, true
		}
	}
	return LinearInput{}, false
}
