package convert

import (
	"context"
	"fmt"

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
	j, err := Start(opt, "w8a8")
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
		w, scale := j.w8a8Linear(ctx, s)
		tensors = append(tensors, w, scale)
		src[w.Name] = s.Name
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
	if err := ctx.Err(); err != nil {
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
func (j *Job) w8a8Linear(ctx context.Context, s spark.TensorSpec) (safetensors.Tensor, safetensors.Tensor) {
	info, _ := j.Model.Info(s.Name)
	n, k := int(s.Shape[0]), int(s.Shape[1])
	mod := s.Module()
	weight := safetensors.Tensor{
		Name: mod + ".weight", DType: "I8", Shape: s.Shape,
		Produce: func() ([]byte, error) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			_, raw, err := j.Model.Raw(s.Name)
			if err != nil {
				return nil, err
			}
			res, err := quant.Int8PerChannelRaw(raw, info.DType, n, k)
			if err != nil {
				return nil, fmt.Errorf("quantize %s: %w", s.Name, err)
			}
			j.AddTensor(TensorReport{Name: s.Name, Scheme: "int8 per-channel symmetric", Shape: s.Shape, SNRdB: res.SNRdB, MaxErr: res.MaxAbsErr})
			return res.Codes, nil
		},
	}
	scale := safetensors.Tensor{
		Name: mod + ".weight_scale", DType: info.DType, Shape: []int64{int64(n), 1},
		Produce: func() ([]byte, error) {
			_, raw, err := j.Model.Raw(s.Name)
			if err != nil {
				return nil, err
			}
			return quant.Int8ScalesRaw(raw, info.DType, n, k)
		},
	}
	return weight, scale
}
