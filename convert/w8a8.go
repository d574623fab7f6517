package convert

import (
	"context"
	"fmt"
	"unsafe"

	"sparkconv/dtype"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// W8A8Config is the quantization_config of a compressed-tensors int8
// checkpoint (formats.md 2.1-2.2): weights int8 symmetric per-channel
// static, input activations int8 symmetric per-token dynamic, one group
// targeting Linear, g_proj and lm_head ignored.
func W8A8Config() map[string]any {
	args := func(strategy string, dynamic bool, observer any) map[string]any {
		return map[string]any{
			"num_bits": 8, "type": "int", "symmetric": true, "group_size": nil,
			"strategy": strategy, "block_structure": nil, "dynamic": dynamic,
			"actorder": nil, "scale_dtype": nil, "zp_dtype": nil,
			"observer": observer, "observer_kwargs": map[string]any{},
		}
	}
	return map[string]any{
		"config_groups": map[string]any{"group_0": map[string]any{
			"targets":            []string{"Linear"},
			"weights":            args("channel", false, "memoryless_minmax"),
			"input_activations":  args("token", true, nil),
			"output_activations": nil,
			"format":             "int-quantized",
		}},
		"format":                   "int-quantized",
		"global_compression_ratio": nil,
		"ignore":                   []string{"lm_head", "re:.*g_proj$"},
		"kv_cache_scheme":          nil,
		"quant_method":             "compressed-tensors",
		"quantization_status":      "compressed",
		"sparsity_config":          map[string]any{},
		"transform_config":         map[string]any{},
	}
}

// W8A8 converts a Spark checkpoint to compressed-tensors W8A8: the 5
// linears of every layer become int8 `weight` [N,K] plus `weight_scale`
// [N,1] in the input dtype; everything else is copied bit for bit.
func W8A8(ctx context.Context, opt Options) (*Report, error) {
	j, err := Start(ctx, opt, "w8a8")
	if err != nil {
		return nil, err
	}
	defer j.Close()
	j.Report.Method = "round-to-nearest, scale = amax/127.5"
	var tensors []safetensors.Tensor
	src := map[string]string{}
	for _, s := range j.Model.Config.Tensors() {
		if s.Kind != spark.KindLinear {
			tensors = append(tensors, j.Copy(s.Name))
			src[s.Name] = s.Name
			j.Report.Totals.Copied++
			continue
		}
		w, scale := j.w8a8Linear(s)
		tensors = append(tensors, w, scale)
		src[w.Name], src[scale.Name] = s.Name, s.Name
	}
	if err := j.WriteTensors(tensors, src); err != nil {
		return nil, err
	}
	if err := j.CopyAux(); err != nil {
		return nil, err
	}
	if err := j.WriteConfig(map[string]any{"quantization_config": W8A8Config()}); err != nil {
		return nil, err
	}
	if err := j.Commit(); err != nil {
		return nil, err
	}
	return j.Report, nil
}

// w8a8Linear returns the int8 weight and its scale tensor. The scale is
// computed (cheaply, from the row maxima) when the writer asks for it, and
// again for the weight: the two are written far apart in the file and
// holding every quantized weight between them would hold the model.
func (j *Job) w8a8Linear(s spark.TensorSpec) (safetensors.Tensor, safetensors.Tensor) {
	info, _ := j.Model.Info(s.Name)
	n, k := int(s.Shape[0]), int(s.Shape[1])
	mod := s.Module()
	weight := safetensors.Tensor{
		Name: mod + ".weight", DType: "I8", Shape: s.Shape,
		Produce: func() ([]byte, error) {
			if err := j.ctx.Err(); err != nil {
				return nil, err
			}
			_, raw, err := j.Model.Raw(s.Name)
			if err != nil {
				return nil, err
			}
			var res quant.Int8Result
			if err := quant.QuantizeInt8(&res, weightMatrix(raw, info.DType, n, k), scaleDType(info.DType)); err != nil {
				return nil, fmt.Errorf("quantize %s: %w", s.Name, err)
			}
			j.AddTensor(TensorReport{Name: s.Name, Scheme: "int8 per-channel symmetric", Shape: s.Shape, SNRdB: res.Stats.SNRdB(), MaxErr: res.Stats.MaxAbs})
			return quant.Int8Bytes(res.Codes), nil
		},
	}
	scale := safetensors.Tensor{
		Name: mod + ".weight_scale", DType: info.DType, Shape: []int64{int64(n), 1},
		Produce: func() ([]byte, error) {
			_, raw, err := j.Model.Raw(s.Name)
			if err != nil {
				return nil, err
			}
			dt := scaleDType(info.DType)
			scales, err := quant.Int8Scales(weightMatrix(raw, info.DType, n, k), dt)
			if err != nil {
				return nil, fmt.Errorf("quantize %s: %w", s.Name, err)
			}
			out := make([]byte, n*dt.Size())
			dt.PutParams(out, scales)
			return out, nil
		},
	}
	return weight, scale
}

// weightMatrix views a float tensor's raw little-endian bytes as a quant
// matrix without copying bf16 (the common case); F16 and F32 are decoded.
func weightMatrix(raw []byte, dt dtype.DType, n, k int) quant.Matrix {
	if dt == dtype.BF16 {
		return quant.BF16Matrix(n, k, unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(raw))), len(raw)/2))
	}
	f := make([]float32, n*k)
	_ = dtype.ToFloat32(f, raw, dt)
	return quant.F32Matrix(n, k, f)
}

// scaleDType maps a weight dtype to the dtype its scales are stored in.
func scaleDType(dt dtype.DType) quant.ScaleDType {
	switch dt {
	case dtype.BF16:
		return quant.ScaleBF16
	case dtype.F16:
		return quant.ScaleF16
	}
	return quant.ScaleF32
}
