package convert

import (
	"encoding/json"
	"fmt"
	"sync"
	"unsafe"

	"sparkconv/dtype"
	"sparkconv/forward"
	"sparkconv/kernels"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// W8A8Config is the quantization_config of a compressed-tensors int8
// checkpoint (docs/formats.md#w8a8): weights int8 symmetric per-channel
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

// W8A8 is the compressed-tensors W8A8 output (a Format), with its
// options: the 5 linears of every layer become int8 `weight` [N,K] plus
// `weight_scale` [N,1] in the input dtype; everything else is copied bit
// for bit (or, when the solver changed them, e.g. SmoothQuant's folded
// norms, written as the solver says).
type W8A8 struct {
	// Keep, if set, are linears kept in float: copied, and named in the
	// config's ignore list.
	Keep *KeepFloat
}

// Name is the scheme, "w8a8".
func (W8A8) Name() string { return "w8a8" }

// CheckFlags accepts any options: W8A8 has no values to refuse.
func (W8A8) CheckFlags() error { return nil }

// Check refuses kept units the model does not have.
func (f W8A8) Check(cfg *spark.Config) error { return f.Keep.check(cfg) }

// Rounds is true: without a solver every weight is rounded to nearest.
func (W8A8) Rounds() bool { return true }

// MixedDTypes is true: rounding to nearest, each weight_scale is in its own
// linear's dtype.
func (W8A8) MixedDTypes() bool { return true }

// Grid is the per-channel int8 grid, scales in the activation dtype (what
// a solve gets; rounding to nearest takes each linear's dtype).
func (W8A8) Grid(act dtype.DType) GridSpec {
	return GridSpec{Kind: GridInt8, DType: ScaleDType(act)}
}

// InputAct is vLLM's input rule for the checkpoint: int8 per token,
// dynamic and symmetric, in the model's activation dtype.
func (W8A8) InputAct(act dtype.DType) forward.Act {
	return forward.Act{DType: act, Int8: forward.Int8Dynamic}
}

// Targets are the 5 linears of every layer, less the kept ones (the head
// stays float).
func (f W8A8) Targets(cfg *spark.Config) []Target { return f.Keep.without(Targets(cfg, false)) }

// Method is round to nearest's rule.
func (W8A8) Method() string { return "round-to-nearest, scale = amax/127.5" }

// Settings are the kept linears, if any.
func (f W8A8) Settings(*Build) map[string]any { return f.Keep.settings(nil) }

// Tensors are the int8 weight and its scale for every quantized linear,
// the rest copied (or replaced as the solution says).
func (f W8A8) Tensors(b *Build) ([]safetensors.Tensor, map[string]string) {
	j, sol := b.Job, b.Solution
	var tensors []safetensors.Tensor
	src := map[string]string{}
	for _, s := range j.Model.Config.Tensors() {
		float := s.Kind != spark.KindLinear || f.Keep.keeps(s.Module())
		if v, ok := replaced(sol, s.Name); ok && float {
			tensors = append(tensors, j.replacedTensor(s.Name, v))
			src[s.Name] = s.Name
			continue
		}
		if float {
			tensors = append(tensors, j.Copy(s.Name))
			src[s.Name] = s.Name
			j.Report.Totals.Copied++
			continue
		}
		w, scale := j.w8a8Linear(s, sol)
		tensors = append(tensors, w, scale)
		src[w.Name], src[scale.Name] = s.Name, s.Name
	}
	return tensors, src
}

// Config sets quantization_config (W8A8Config, the kept linears added to
// its ignore list) and the kept linears.
func (f W8A8) Config(*Build) map[string]any {
	qc := W8A8Config()
	qc["ignore"] = append(qc["ignore"].([]string), f.Keep.Modules()...)
	return map[string]any{"quantization_config": qc, KeepFloatKey: f.Keep.config()}
}

// w8a8Linear returns the int8 weight and its scale tensor. The scales are
// computed (one SIMD pass over the row maxima, which also refuses NaN/Inf)
// for whichever of the two the writer asks for first, the scale tensor
// in the single-file layout, and kept (4 bytes a row) for the other: the
// two are written far apart in the file and holding every quantized weight
// between them would hold the model. The weight then takes one fused pass.
func (j *Job) w8a8Linear(s spark.TensorSpec, sol Solution) (safetensors.Tensor, safetensors.Tensor) {
	if sol != nil {
		return j.w8a8Solved(s, sol)
	}
	info, _ := j.Model.Info(s.Name)
	n, k := int(s.Shape[0]), int(s.Shape[1])
	mod := s.Module()
	dt := ScaleDType(info.DType)
	l := &w8a8RTN{j: j, name: s.Name, dt: dt, n: n, k: k}
	weight := safetensors.Tensor{
		Name: mod + ".weight", DType: "I8", Shape: s.Shape,
		Produce: func() ([]byte, error) {
			m, scales, err := l.scales()
			if err != nil {
				return nil, err
			}
			var res quant.Int8Result
			if err := quant.QuantizeInt8Scaled(&res, m, scales); err != nil {
				return nil, fmt.Errorf("quantize %s: %w", s.Name, err)
			}
			l.release()
			j.AddTensor(TensorReport{Name: s.Name, Scheme: "int8 per-channel symmetric", Shape: s.Shape, SNRdB: res.Stats.SNRdB(), MaxErr: res.Stats.MaxAbs})
			return quant.Int8Bytes(res.Codes), nil
		},
	}
	scale := safetensors.Tensor{
		Name: mod + ".weight_scale", DType: info.DType, Shape: []int64{int64(n), 1},
		Produce: func() ([]byte, error) {
			_, scales, err := l.scales()
			if err != nil {
				return nil, err
			}
			l.release()
			out := make([]byte, n*dt.Size())
			dt.PutParams(out, scales)
			return out, nil
		},
	}
	return weight, scale
}

// w8a8RTN holds one linear's row scales between its two output tensors.
type w8a8RTN struct {
	j      *Job
	name   string
	dt     quant.ScaleDType
	n, k   int
	mu     sync.Mutex
	scaled []float32
	users  int // output tensors produced so far
}

// scales returns the weight matrix and its row scales, computing the
// scales on the first call. The input is read without the separate NaN/Inf
// scan: Int8Scales refuses non-finite values as it finds the maxima.
func (l *w8a8RTN) scales() (quant.Matrix, []float32, error) {
	if err := l.j.ctx.Err(); err != nil {
		return quant.Matrix{}, nil, err
	}
	info, raw, err := l.j.Model.Checkpoint.Raw(l.name)
	if err != nil {
		return quant.Matrix{}, nil, err
	}
	m := weightMatrix(raw, info.DType, l.n, l.k)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.scaled == nil {
		if l.scaled, err = quant.Int8Scales(m, l.dt); err != nil {
			l.scaled = nil
			return m, nil, fmt.Errorf("%s: quantize %s: %w", l.j.Model.File(l.name), l.name, err)
		}
	}
	return m, l.scaled, nil
}

// release drops the scales once both tensors have them.
func (l *w8a8RTN) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.users++; l.users == 2 {
		l.scaled = nil
	}
}

// w8a8Reader reads a compressed-tensors W8A8 checkpoint back: w = q *
// weight_scale per output channel; the runtime (vLLM's
// CompressedTensorsW8A8Int8, dynamic per-token input) quantizes each
// linear's input to int8 per token.
type w8a8Reader struct {
	act    dtype.DType // model dtype: weight_scale's dtype and the activations'
	ignore excluded    // modules the config's ignore list keeps float
}

func newW8A8Reader(qc json.RawMessage, act dtype.DType, ign excluded) (formatReader, error) {
	var c struct {
		Format string `json:"format"`
		Groups map[string]struct {
			Weights struct {
				NumBits  int    `json:"num_bits"`
				Strategy string `json:"strategy"`
				Sym      bool   `json:"symmetric"`
			} `json:"weights"`
			Input *struct {
				NumBits  int    `json:"num_bits"`
				Strategy string `json:"strategy"`
				Dynamic  bool   `json:"dynamic"`
			} `json:"input_activations"`
		} `json:"config_groups"`
	}
	if err := json.Unmarshal(qc, &c); err != nil {
		return nil, err
	}
	g, ok := c.Groups["group_0"]
	if c.Format != "int-quantized" || len(c.Groups) != 1 || !ok {
		return nil, fmt.Errorf("compressed-tensors: only sparkconv's W8A8 (format int-quantized, one config group) is read, got format %q with %d groups", c.Format, len(c.Groups))
	}
	w, in := g.Weights, g.Input
	if w.NumBits != 8 || w.Strategy != "channel" || !w.Sym || in == nil || in.NumBits != 8 || in.Strategy != "token" || !in.Dynamic {
		return nil, fmt.Errorf("compressed-tensors: only int8 symmetric per-channel weights with dynamic per-token int8 inputs are read")
	}
	return w8a8Reader{act: act, ignore: ign}, nil
}

func (r w8a8Reader) describe() string {
	return fmt.Sprintf("W8A8 (compressed-tensors int8 per channel, %s scales, int8 per-token activations)", r.act)
}

func (r w8a8Reader) parts(ck *safetensors.Checkpoint, s spark.TensorSpec) (bool, error) {
	mod := s.Module()
	if s.Kind != spark.KindLinear || r.ignore.match(mod) {
		return false, nil
	}
	if err := checkPart(ck, mod+".weight", dtype.I8, s.Shape...); err != nil {
		return true, err
	}
	return true, checkPart(ck, mod+".weight_scale", r.act, s.Shape[0], 1)
}

func (r w8a8Reader) dequantize(ck *safetensors.Checkpoint, s spark.TensorSpec, dst []float32) (forward.Act, error) {
	mod := s.Module()
	_, q, err := ck.Raw(mod + ".weight")
	if err != nil {
		return forward.Act{}, err
	}
	_, sc, err := ck.Raw(mod + ".weight_scale")
	if err != nil {
		return forward.Act{}, err
	}
	n, k := int(s.Shape[0]), int(s.Shape[1])
	scales := make([]float32, n)
	if err := dtype.ToFloat32(scales, sc, r.act); err != nil {
		return forward.Act{}, fmt.Errorf("%s.weight_scale: %w", mod, err)
	}
	kernels.Parallel(n, func(lo, hi int) {
		for row := lo; row < hi; row++ {
			p := quant.Int8{Scale: scales[row]}
			codes := unsafe.Slice((*int8)(unsafe.Pointer(&q[row*k])), k)
			p.Dequantize(dst[row*k:(row+1)*k], codes)
		}
	})
	return W8A8{}.InputAct(r.act), nil
}

func (w8a8Reader) release(ck *safetensors.Checkpoint, s spark.TensorSpec) {
	releaseParts(ck, s.Module(), "weight", "weight_scale")
}

// w8a8Solved returns the int8 weight and scale tensors of a solved linear:
// both are read back from the solution when the writer asks for them.
func (j *Job) w8a8Solved(s spark.TensorSpec, sol Solution) (safetensors.Tensor, safetensors.Tensor) {
	info, _ := j.Model.Info(s.Name)
	n, k := int(s.Shape[0]), int(s.Shape[1])
	t := Target{Source: s.Name, Module: s.Module(), N: n, K: k}
	dt := ScaleDType(info.DType)
	var mu sync.Mutex
	reported := false
	get := func() (*quant.Int8Result, error) {
		if err := j.ctx.Err(); err != nil {
			return nil, err
		}
		var res quant.Int8Result
		if err := sol.ChooseInt8(&res, t); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !reported {
			reported = true
			j.AddTensor(TensorReport{Name: s.Name, Scheme: "int8 per-channel symmetric, " + sol.Method(), Shape: s.Shape,
				SNRdB: res.Stats.SNRdB(), MaxErr: res.Stats.MaxAbs, GPTQ: sol.Module(t)})
		}
		return &res, nil
	}
	weight := safetensors.Tensor{
		Name: t.Module + ".weight", DType: "I8", Shape: s.Shape,
		Produce: func() ([]byte, error) {
			res, err := get()
			if err != nil {
				return nil, err
			}
			return quant.Int8Bytes(res.Codes), nil
		},
	}
	scale := safetensors.Tensor{
		Name: t.Module + ".weight_scale", DType: info.DType, Shape: []int64{int64(n), 1},
		Produce: func() ([]byte, error) {
			res, err := get()
			if err != nil {
				return nil, err
			}
			out := make([]byte, n*dt.Size())
			dt.PutParams(out, res.Scales)
			return out, nil
		},
	}
	return weight, scale
}

func replaced(sol Solution, name string) ([]float32, bool) {
	if sol == nil {
		return nil, false
	}
	return sol.Replaced(name)
}

// replacedTensor writes new values v for the input tensor name, in its
// dtype and shape.
func (j *Job) replacedTensor(name string, v []float32) safetensors.Tensor {
	info, _ := j.Model.Info(name)
	return safetensors.Tensor{
		Name: name, DType: info.DType, Shape: info.Shape,
		Produce: func() ([]byte, error) {
			if int64(len(v)) != info.NumElements() {
				return nil, fmt.Errorf("%s: %d new values for %d", name, len(v), info.NumElements())
			}
			return dtype.FromFloat32(v, info.DType)
		},
	}
}
