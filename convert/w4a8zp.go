package convert

// W4A8-ZP: compressed-tensors' pack-quantized int4 with a zero point per
// group (symmetric false), the format W4A8ZP below declares (Convert
// writes it) with its reader, documented in docs/formats.md#w4a8-zp.
// vLLM loads it through CompressedTensorsWNA16 as uint4 with zero points
// and runs it on CPU with CPUWNA16LinearKernel: W4A8 (int4_scaled_mm_cpu,
// int8 per-token activations) on AMX CPUs with a bf16 model, W4A16
// (cpu_gemm_wna16) elsewhere.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"sparkconv/dtype"
	"sparkconv/forward"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// W4A8ZPGroupSizes are the group sizes the format is written with (even,
// dividing K: CPUWNA16LinearKernel.can_implement).
var W4A8ZPGroupSizes = []int{32, 64, 128}

// W4A8ZP is the compressed-tensors int4 output with zero points (a
// Format): the 5 linears of every layer (and the head with QuantHead)
// become weight_packed, weight_scale, weight_zero_point and weight_shape;
// everything else is copied bit for bit.
type W4A8ZP struct {
	Group     int  // 32, 64 or 128
	QuantHead bool // quantize the output head (untying it; vLLM matches it by the "lm_head" target)
	NoSearch  bool // plain min/max parameters instead of the MSE search
	// Chooser, if set, chooses the codes instead of round-to-nearest (on
	// the integer-zero grid; it must fill Codes, Scales and Zeros).
	Chooser CodeChooser
	// Keep, if set, are linears kept in float: copied, and named in the
	// config's ignore list.
	Keep *KeepFloat
}

// Name is the scheme, "w4a8-zp".
func (W4A8ZP) Name() string { return "w4a8-zp" }

// CheckFlags validates the option values (usage errors).
func (f W4A8ZP) CheckFlags() error {
	if !slices.Contains(W4A8ZPGroupSizes, f.Group) {
		return fmt.Errorf("--group %d: want one of %v", f.Group, W4A8ZPGroupSizes)
	}
	return nil
}

func (f W4A8ZP) chooser() CodeChooser {
	if f.Chooser != nil {
		return f.Chooser
	}
	return RTN{Kind: GridUInt4, Search: !f.NoSearch}
}

// Rounds reports whether the codes are rounded to nearest (no Chooser).
func (f W4A8ZP) Rounds() bool { return f.Chooser == nil }

// MixedDTypes is false: the scales are in the one activation dtype.
func (W4A8ZP) MixedDTypes() bool { return false }

// Grid is the integer-zero 4-bit grid, scales in the activation dtype
// (compressed-tensors stores weight_scale in the model's dtype).
func (f W4A8ZP) Grid(act dtype.DType) GridSpec {
	return GridSpec{Kind: GridUInt4, Group: f.Group, DType: ScaleDType(act), Search: !f.NoSearch}
}

// InputAct is vLLM's CPU input rule, the same kernel as the GPTQ
// checkpoint's: int8 per token (W4A8) for a bf16 model, the model's dtype
// otherwise.
func (W4A8ZP) InputAct(act dtype.DType) forward.Act { return W4A8{}.InputAct(act) }

// Targets are the 5 linears of every layer and, with QuantHead, the head,
// less the kept ones.
func (f W4A8ZP) Targets(cfg *spark.Config) []Target {
	return f.Keep.without(Targets(cfg, f.QuantHead))
}

// Method names the chooser.
func (f W4A8ZP) Method() string { return f.chooser().Method() }

// Settings are the 4-bit settings, a warning when vLLM will not run the
// W4A8 kernel, and the kept linears.
func (f W4A8ZP) Settings(b *Build) map[string]any { return cpuInt4Settings(b, f.QuantHead, f.Keep) }

// Tensors are the four tensors of every target (W4A8ZPParts), the rest
// copied.
func (f W4A8ZP) Tensors(b *Build) ([]safetensors.Tensor, map[string]string) {
	return b.Int4Model(f.chooser(), func(t Target) []Int4Part { return W4A8ZPParts(t, b.Grid.Group, b.Act) })
}

// Config sets quantization_config (W4A8ZP.QuantConfig) and the kept
// linears.
func (f W4A8ZP) Config(b *Build) map[string]any {
	return map[string]any{"quantization_config": f.QuantConfig(b.Job.Report.Calibration, b.Job.Opt.Version), KeepFloatKey: f.Keep.config()}
}

// Check refuses a model vLLM's CPU kernel cannot take: K and N multiples
// of 32 (CPUWNA16LinearKernel.can_implement) and a group that divides K;
// for a quantized head, a vocabulary that is a multiple of 64.
func (f W4A8ZP) Check(cfg *spark.Config) error {
	err := CheckTargets("vLLM's CPU int4 kernel (CPUWNA16LinearKernel)", Targets(cfg, f.QuantHead), func(t Target) []string {
		why := cpuWNA16Shape(t, f.Group, W4A8ZPGroupSizes)
		if t.Module == "lm_head" && t.N%64 != 0 {
			why = append(why, fmt.Sprintf("vocab_size %d is not a multiple of 64: vLLM pads the LM head's vocabulary to a multiple of 64, and weight_zero_point is packed along it; drop --quant-head", t.N))
		}
		return why
	})
	if err != nil {
		return err
	}
	return f.Keep.check(cfg)
}

// QuantConfig is the quantization_config: one config group of int4
// asymmetric group-wise static weights targeting Linear (and lm_head by
// name with QuantHead: vLLM's ParallelLMHead is no Linear), no activation
// scheme (vLLM picks the activation path at load), format pack-quantized,
// g_proj, the kept linears and a float lm_head ignored; the sparkconv key
// records what chose the codes.
func (f W4A8ZP) QuantConfig(cal *Calibration, version string) map[string]any {
	weights := map[string]any{
		"num_bits": 4, "type": "int", "symmetric": false, "group_size": f.Group,
		"strategy": "group", "block_structure": nil, "dynamic": false,
		"actorder": nil, "scale_dtype": nil, "zp_dtype": nil,
		"observer": "minmax", "observer_kwargs": map[string]any{},
	}
	meta := map[string]any{"quantizer": []string{"sparkconv:" + version}, "method": f.Method(), "calibration": "none"}
	if cal != nil {
		calMeta(meta, cal)
	}
	targets, ignore := []string{"Linear"}, []string{"lm_head", "re:.*g_proj$"}
	if f.QuantHead {
		targets, ignore = []string{"Linear", "lm_head"}, ignore[1:]
	}
	return map[string]any{
		"config_groups": map[string]any{"group_0": map[string]any{
			"targets":            targets,
			"weights":            weights,
			"input_activations":  nil,
			"output_activations": nil,
			"format":             "pack-quantized",
		}},
		"format":                   "pack-quantized",
		"global_compression_ratio": nil,
		"ignore":                   append(ignore, f.Keep.Modules()...),
		"kv_cache_scheme":          nil,
		"quant_method":             "compressed-tensors",
		"quantization_status":      "compressed",
		"sparsity_config":          map[string]any{},
		"transform_config":         map[string]any{},
		"sparkconv":                meta,
	}
}

// W4A8ZPParts are the tensors of one linear W[N, K] with group g:
// weight_packed int32 [N, K/8] (packed along K), weight_scale [N, K/g] in
// the activation dtype, weight_zero_point int32 [N/8, K/g] (packed along
// N), weight_shape int64 [2] = (N, K).
func W4A8ZPParts(t Target, g int, act dtype.DType) []Int4Part {
	n, k, groups := t.N, t.K, t.K/g
	dt := ScaleDType(act)
	return []Int4Part{
		{
			Suffix: "weight_packed", DType: dtype.I32, Shape: []int64{int64(n), int64(k / 8)}, Uses: UsesCodes,
			Encode: func(dst []byte, r *quant.Int4Result) error { return quant.PackCTWeight(dst, r.Codes, n, k) },
		},
		{
			Suffix: "weight_scale", DType: act, Shape: []int64{int64(n), int64(groups)}, Uses: UsesParams,
			Encode: func(dst []byte, r *quant.Int4Result) error {
				dt.PutParams(dst, r.Scales)
				return nil
			},
			Restore: func(r *quant.Int4Result, src []byte) error {
				for i := range r.Scales {
					r.Scales[i] = dt.Param(src, i)
				}
				return nil
			},
		},
		{
			Suffix: "weight_zero_point", DType: dtype.I32, Shape: []int64{int64(n / 8), int64(groups)}, Uses: UsesParams,
			Encode: func(dst []byte, r *quant.Int4Result) error {
				return quant.PackCTZeros(dst, zeroPoints(r), n, groups)
			},
			Restore: func(r *quant.Int4Result, src []byte) error { // after weight_scale's
				z := make([]uint8, n*groups)
				if err := quant.UnpackCTZeros(z, src, n, groups); err != nil {
					return err
				}
				for i, zi := range z {
					r.Zeros[i] = quant.UInt4Params(r.Scales[i], zi).Zero
				}
				return nil
			},
		},
		{
			Suffix: "weight_shape", DType: dtype.I64, Shape: []int64{2}, Uses: UsesNothing,
			Encode: func(dst []byte, _ *quant.Int4Result) error {
				binary.LittleEndian.PutUint64(dst, uint64(n))
				binary.LittleEndian.PutUint64(dst[8:], uint64(k))
				return nil
			},
		},
	}
}

// zeroPoints are r's integer zero points [N, groups].
func zeroPoints(r *quant.Int4Result) []uint8 {
	z := make([]uint8, len(r.Scales))
	for i, s := range r.Scales {
		z[i] = quant.UInt4Zero(quant.Asym4{Scale: s, Zero: r.Zeros[i]})
	}
	return z
}

// w4a8zpReader reads the checkpoint back as vLLM dequantizes it:
// w = (q - z) * scale per group, the input rule of W4A8ZP.InputAct.
type w4a8zpReader struct {
	group     int
	quantHead bool // a config group targets lm_head
	act       dtype.DType
	ignore    excluded
}

func newW4A8ZPReader(qc json.RawMessage, act dtype.DType, ign excluded) (formatReader, error) {
	var c struct {
		Groups map[string]struct {
			Targets []string `json:"targets"`
			Weights struct {
				NumBits  int    `json:"num_bits"`
				Type     string `json:"type"`
				Strategy string `json:"strategy"`
				Sym      bool   `json:"symmetric"`
				Group    int    `json:"group_size"`
				ActOrder any    `json:"actorder"`
			} `json:"weights"`
			Input json.RawMessage `json:"input_activations"`
		} `json:"config_groups"`
	}
	if err := json.Unmarshal(qc, &c); err != nil {
		return nil, err
	}
	g, ok := c.Groups["group_0"]
	if len(c.Groups) != 1 || !ok {
		return nil, fmt.Errorf("compressed-tensors pack-quantized: only one config group (group_0) is read, got %d", len(c.Groups))
	}
	w := g.Weights
	if w.NumBits != 4 || w.Type != "int" || w.Strategy != "group" || w.Sym || w.Group <= 0 || w.Group%8 != 0 || w.ActOrder != nil || (len(g.Input) > 0 && string(g.Input) != "null") {
		return nil, fmt.Errorf("compressed-tensors pack-quantized: only sparkconv's w4a8-zp is read (int4, symmetric false, strategy group, a group size that is a multiple of 8, no actorder, no activation scheme); got num_bits %d, type %q, strategy %q, symmetric %v, group_size %d",
			w.NumBits, w.Type, w.Strategy, w.Sym, w.Group)
	}
	head := slices.Contains(g.Targets, "lm_head") && !ign.match("lm_head")
	return w4a8zpReader{group: w.Group, quantHead: head, act: act, ignore: ign}, nil
}

func (r w4a8zpReader) describe() string {
	return fmt.Sprintf("compressed-tensors int4 with zero points g%d (%s)", r.group, cpuInt4Kernel(r.act, r.quantHead))
}

func (r w4a8zpReader) parts(ck *safetensors.Checkpoint, s spark.TensorSpec) (bool, error) {
	mod := s.Module()
	if s.Kind == spark.KindHead && !r.quantHead || s.Kind != spark.KindLinear && s.Kind != spark.KindHead || r.ignore.match(mod) {
		return false, nil
	}
	n, k := s.Shape[0], s.Shape[1]
	if k%int64(r.group) != 0 || n%8 != 0 {
		return true, fmt.Errorf("%s [%d, %d]: group %d does not divide K or N is not a multiple of 8", mod, n, k, r.group)
	}
	g := k / int64(r.group)
	for _, p := range []struct {
		suffix string
		dt     dtype.DType
		shape  []int64
	}{{"weight_packed", dtype.I32, []int64{n, k / 8}}, {"weight_scale", r.act, []int64{n, g}}, {"weight_zero_point", dtype.I32, []int64{n / 8, g}}, {"weight_shape", dtype.I64, []int64{2}}} {
		if err := checkPart(ck, mod+"."+p.suffix, p.dt, p.shape...); err != nil {
			return true, err
		}
	}
	return true, nil
}

func (r w4a8zpReader) dequantize(ck *safetensors.Checkpoint, s spark.TensorSpec, dst []float32) (forward.Act, error) {
	mod, n, k := s.Module(), int(s.Shape[0]), int(s.Shape[1])
	raw := map[string][]byte{}
	for _, p := range []string{"weight_packed", "weight_scale", "weight_zero_point", "weight_shape"} {
		_, b, err := ck.Raw(mod + "." + p)
		if err != nil {
			return forward.Act{}, err
		}
		raw[p] = b
	}
	if sn, sk := binary.LittleEndian.Uint64(raw["weight_shape"]), binary.LittleEndian.Uint64(raw["weight_shape"][8:]); sn != uint64(n) || sk != uint64(k) {
		return forward.Act{}, fmt.Errorf("%s.weight_shape is [%d, %d], the model's weight is [%d, %d]", mod, int64(sn), int64(sk), n, k)
	}
	groups := k / r.group
	res := quant.Int4Result{N: n, K: k, Group: r.group, Codes: make([]uint8, n*k), Scales: make([]float32, n*groups), Zeros: make([]float32, n*groups)}
	if err := quant.UnpackCTWeight(res.Codes, raw["weight_packed"], n, k); err != nil {
		return forward.Act{}, fmt.Errorf("%s.weight_packed: %w", mod, err)
	}
	if err := dtype.ToFloat32(res.Scales, raw["weight_scale"], r.act); err != nil {
		return forward.Act{}, fmt.Errorf("%s.weight_scale: %w", mod, err)
	}
	z := make([]uint8, n*groups)
	if err := quant.UnpackCTZeros(z, raw["weight_zero_point"], n, groups); err != nil {
		return forward.Act{}, fmt.Errorf("%s.weight_zero_point: %w", mod, err)
	}
	for i, zi := range z {
		res.Zeros[i] = quant.UInt4Params(res.Scales[i], zi).Zero
	}
	dequantizeInt4(&res, dst)
	return W4A8ZP{}.InputAct(r.act), nil
}

func (w4a8zpReader) release(ck *safetensors.Checkpoint, s spark.TensorSpec) {
	releaseParts(ck, s.Module(), "weight_packed", "weight_scale", "weight_zero_point", "weight_shape")
}

// newCompressedTensorsReader reads the compressed-tensors formats sparkconv
// writes, by their format: int-quantized (W8A8) or pack-quantized
// (w4a8-zp); the ignore list keeps modules float in both.
func newCompressedTensorsReader(qc json.RawMessage, act dtype.DType) (formatReader, error) {
	var c struct {
		Format string   `json:"format"`
		Ignore []string `json:"ignore"`
	}
	if err := json.Unmarshal(qc, &c); err != nil {
		return nil, err
	}
	var ign excluded
	for _, e := range c.Ignore {
		p, re := strings.CutPrefix(e, "re:")
		if err := ign.add(p, re); err != nil {
			return nil, fmt.Errorf("compressed-tensors ignore: %w", err)
		}
	}
	switch c.Format {
	case "int-quantized":
		return newW8A8Reader(qc, act, ign)
	case "pack-quantized":
		return newW4A8ZPReader(qc, act, ign)
	}
	return nil, fmt.Errorf("compressed-tensors: format %q is not one sparkconv reads (int-quantized: W8A8; pack-quantized: w4a8-zp)", c.Format)
}
