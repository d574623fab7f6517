package keepfloat

import (
	"fmt"

	"sparkconv/convert"
	"sparkconv/dtype"
	"sparkconv/forward"
	"sparkconv/quant"
)

// Format is how the target build quantizes one linear: its weight grid
// (round to nearest, the build's parameter rule) and its runtime's input
// rule.
type Format struct {
	Name  string
	Act   forward.Act
	Group int // 4-bit grids: the group size; 0 for per-channel int8
	grid  string
	dt    quant.ScaleDType
}

// W8A8 is compressed-tensors' int8 per channel (amax/127.5) with vLLM's
// int8 per-token activations, for a model of activation dtype act.
func W8A8(act dtype.DType) Format {
	return Format{Name: "w8a8", Act: forward.Act{DType: act, Int8: forward.Int8Dynamic}, grid: "int8", dt: convert.ScaleDType(act)}
}

// GPTQ is the symmetric 4-bit grid (fp16 scales, MSE search) with vLLM's
// W4A8 input (quantize_row_int8) for a bf16 model, or the W4A16 path's
// activations in the model dtype otherwise, as the gptq reader runs it.
func GPTQ(act dtype.DType, group int) Format {
	a := forward.Act{DType: act}
	if act == dtype.BF16 {
		a.Int8 = forward.Int8VLLMRow
	}
	return Format{Name: "gptq", Act: a, Group: group, grid: "sym4", dt: quant.ScaleF16}
}

func (f Format) describe() string {
	g := "int8 per channel, round to nearest"
	if f.grid == "sym4" {
		g = fmt.Sprintf("int4 symmetric group %d, MSE-searched scales, round to nearest", f.Group)
	}
	return g + "; inputs " + f.Act.String()
}

// quantize returns the dequantized round-to-nearest weights of w [n, k].
func (f Format) quantize(w []float32, n, k int) ([]float32, error) {
	m := quant.F32Matrix(n, k, w)
	out := make([]float32, n*k)
	if f.grid == "int8" {
		scales, err := quant.Int8Scales(m, f.dt)
		if err != nil {
			return nil, err
		}
		var r quant.Int8Result
		if err := quant.QuantizeInt8Scaled(&r, m, scales); err != nil {
			return nil, err
		}
		r.Dequantize(out)
		return out, nil
	}
	var r quant.Int4Result
	if err := quant.QuantizeSym4(&r, m, f.Group, f.dt, true); err != nil {
		return nil, err
	}
	r.Dequantize(out)
	return out, nil
}
