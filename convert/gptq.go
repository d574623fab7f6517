package convert

// GPTQ-format 4-bit checkpoints (quant_method "gptq", checkpoint_format
// "gptq", v1 zero convention, sym=true) for vLLM's CPU W4A8 kernel
// (int4_scaled_mm_cpu, AMX), as docs/formats.md#gptq-w4a8 describes
// them: the refusals of shapes vLLM's CPU path cannot load, the
// quantization_config, the four tensors of each quantized linear (qweight,
// qzeros, scales, g_idx) and the untied quantized head. The grid (quant.Sym4:
// w = (q - 8) * scale, zero pinned at 8 because the CPU kernel ignores
// qzeros) and the packers come from package quant; how codes are chosen is a
// CodeChooser (round to nearest with a per-group MSE scale search when
// W4A8.Chooser is nil).

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

// GPTQGroupSizes are the group sizes vLLM's CPU GPTQ path accepts
// (MARLIN_SUPPORTED_GROUP_SIZES without -1, which sparkconv does not write).
var GPTQGroupSizes = []int{32, 64, 128}

// W4A8 is the GPTQ-format W4A8 output (a Format), with its options: the 5
// linears of every layer (and the head with QuantHead) become qweight,
// qzeros, scales and g_idx; everything else is copied bit for bit.
type W4A8 struct {
	Group     int  // 32, 64 or 128
	QuantHead bool // quantize the output head (untying it from the embedding)
	NoSearch  bool // absmax scales instead of the MSE search
	// Chooser, if set, chooses the codes instead of round-to-nearest (on
	// the symmetric grid; it must fill Codes and Scales).
	Chooser CodeChooser
	// Keep, if set, are linears kept in float: copied, and excluded by a
	// negative dynamic rule.
	Keep *KeepFloat
}

// Name is the scheme, "gptq".
func (W4A8) Name() string { return "gptq" }

// CheckFlags validates the option values (usage errors).
func (f W4A8) CheckFlags() error {
	if !slices.Contains(GPTQGroupSizes, f.Group) {
		return fmt.Errorf("--group %d: vLLM's CPU GPTQ path accepts group sizes %v", f.Group, GPTQGroupSizes)
	}
	return nil
}

// chooser is the chooser the options select.
func (f W4A8) chooser() CodeChooser {
	if f.Chooser != nil {
		return f.Chooser
	}
	return RTN{Kind: GridSym4, Search: !f.NoSearch}
}

// Rounds reports whether the codes are rounded to nearest (no Chooser).
func (f W4A8) Rounds() bool { return f.Chooser == nil }

// MixedDTypes is false: the checkpoint is made for one activation dtype.
func (W4A8) MixedDTypes() bool { return false }

// Grid is the symmetric 4-bit grid with fp16 scales, whatever the model's
// dtype (vLLM's GPTQ scales are fp16).
func (f W4A8) Grid(dtype.DType) GridSpec {
	return GridSpec{Kind: GridSym4, Group: f.Group, DType: quant.ScaleF16, Search: !f.NoSearch}
}

// InputAct is vLLM's CPU input rule for the checkpoint: W4A8
// (quantize_row_int8, int8 per row) for a bf16 model, the W4A16 path in
// the model's dtype otherwise.
func (W4A8) InputAct(act dtype.DType) forward.Act {
	if act == dtype.BF16 {
		return forward.Act{DType: act, Int8: forward.Int8VLLMRow}
	}
	return forward.Act{DType: act}
}

// Targets are the 5 linears of every layer and, with QuantHead, the head,
// less the kept ones.
func (f W4A8) Targets(cfg *spark.Config) []Target { return f.Keep.without(Targets(cfg, f.QuantHead)) }

// Method names the chooser.
func (f W4A8) Method() string { return f.chooser().Method() }

// Settings are the 4-bit settings, a warning when vLLM will not run the
// W4A8 kernel (a model that is not bf16), and the kept linears.
func (f W4A8) Settings(b *Build) map[string]any { return cpuInt4Settings(b, f.QuantHead, f.Keep) }

// cpuInt4Settings are the settings of a checkpoint for vLLM's CPU int4
// kernel (gptq, w4a8-zp): the 4-bit settings, a warning when vLLM will
// not run its W4A8 path (a model that is not bf16), and the kept linears.
func cpuInt4Settings(b *Build, quantHead bool, keep *KeepFloat) map[string]any {
	s := int4Settings(b.Grid, quantHead)
	if b.Act != dtype.BF16 {
		s["warning"] = fmt.Sprintf("the model's linears are %s: vLLM runs the W4A8 kernel only for bf16 models and will use its W4A16 path (cpu_gemm_wna16) instead", b.Act)
	}
	return keep.settings(s)
}

// cpuInt4Kernel names the kernel vLLM's CPU int4 path runs for a model of
// dtype act, and the quantized head, for a reader's describe.
func cpuInt4Kernel(act dtype.DType, quantHead bool) string {
	kernel := "W4A8, int8 per-token activations"
	if act != dtype.BF16 {
		kernel = fmt.Sprintf("W4A16 path for a %s model", act)
	}
	if quantHead {
		kernel += ", quantized head"
	}
	return kernel
}

// Tensors are the four GPTQ tensors of every target (GPTQParts), the rest
// copied.
func (f W4A8) Tensors(b *Build) ([]safetensors.Tensor, map[string]string) {
	return b.Int4Model(f.chooser(), func(t Target) []Int4Part { return GPTQParts(t, b.Grid.Group) })
}

// Config sets quantization_config (W4A8.QuantConfig) and the kept linears.
func (f W4A8) Config(b *Build) map[string]any {
	return map[string]any{"quantization_config": f.QuantConfig(b.Job.Report.Calibration, b.Job.Opt.Version), KeepFloatKey: f.Keep.config()}
}

// cpuWNA16Shape is why vLLM's CPU int4 kernel (CPUWNA16LinearKernel, GPTQ
// and zero-point checkpoints alike) cannot take t at group g: K and N
// multiples of 32 (can_implement) and g dividing K (sizes: the group sizes
// the format offers).
func cpuWNA16Shape(t Target, g int, sizes []int) []string {
	var why []string
	if t.K%32 != 0 {
		why = append(why, fmt.Sprintf("K=%d is not a multiple of 32 (the CPU kernel needs K %% 32 == 0)", t.K))
	}
	if t.N%32 != 0 {
		why = append(why, fmt.Sprintf("N=%d is not a multiple of 32 (the CPU kernel needs N %% 32 == 0)", t.N))
	}
	if t.K%g != 0 {
		why = append(why, fmt.Sprintf("--group %d does not divide K=%d (choose a group size in %v that divides it)", g, t.K, sizes))
	}
	return why
}

// vllmCPU names the target in refusals.
const vllmCPU = "vLLM's CPU GPTQ path (CPUWNA16LinearKernel / int4_scaled_mm_cpu)"

// Check refuses a model vLLM's CPU path cannot load: per quantized linear K
// and N multiples of 32 (CPUWNA16LinearKernel.can_implement) and K a
// multiple of the group size; for a quantized head, a vocabulary that is a
// multiple of 64. It also refuses kept units the model does not have.
func (f W4A8) Check(cfg *spark.Config) error {
	err := CheckTargets(vllmCPU, Targets(cfg, f.QuantHead), func(t Target) []string {
		why := cpuWNA16Shape(t, f.Group, GPTQGroupSizes)
		if t.Module == "lm_head" && t.N%64 != 0 {
			why = append(why, fmt.Sprintf("vocab_size %d is not a multiple of 64: vLLM pads the LM head's vocabulary to a multiple of 64 and copies the checkpoint into the padded parameter, which fails for a packed qweight [K/8, vocab]; drop --quant-head", t.N))
		}
		return why
	})
	if err != nil {
		return err
	}
	return f.Keep.check(cfg)
}

// QuantConfig is the quantization_config: GPTQ v1, 4 bits, symmetric,
// desc_act false (g_idx is always k/g: vLLM's W4A8 kernel refuses
// desc_act), g_proj kept in float through a negative `dynamic` rule, and
// what really chose the codes in meta. Without calibration (cal nil) no
// Hessian step ran, so damp_percent is not written (transformers would
// reject 0 and any other value would be made up) and true_sequential and
// static_groups are false; with it, they say what the solve did and meta
// names the calibration text (sha256, samples, tokens).
func (f W4A8) QuantConfig(cal *Calibration, version string) map[string]any {
	mse := 0.0
	if !f.NoSearch && f.Chooser == nil {
		mse = 2.0 // squared error, GPTQModel's `mse` norm exponent
	}
	meta := map[string]any{
		"quantizer":   []string{"sparkconv:" + version},
		"method":      f.Method(),
		"calibration": "none",
		"mse":         mse,
	}
	dynamic := map[string]any{"-:.*g_proj": map[string]any{}}
	f.Keep.gptqDynamic(dynamic)
	if kept := f.Keep.Modules(); kept != nil {
		meta["keep_float"] = kept
	}
	qc := map[string]any{
		"quant_method":      "gptq",
		"checkpoint_format": "gptq",
		"bits":              4,
		"group_size":        f.Group,
		"sym":               true,
		"desc_act":          false,
		"lm_head":           f.QuantHead,
		"pack_dtype":        "int32",
		"dynamic":           dynamic,
		"true_sequential":   false,
		"static_groups":     false,
		"meta":              meta,
	}
	if cal != nil {
		qc["damp_percent"] = cal.DampPercent
		qc["true_sequential"] = cal.TrueSequential
		qc["static_groups"] = cal.StaticGroups
		calMeta(meta, cal)
	}
	return qc
}

// GPTQParts are the four tensors of one quantized linear W[N, K] with group g:
// qweight int32 [K/8, N], qzeros int32 [K/g, N/8] (all 0x77777777), scales
// fp16 [K/g, N], g_idx int32 [K] = k/g.
func GPTQParts(t Target, g int) []Int4Part {
	n, k, groups := t.N, t.K, t.K/g
	return []Int4Part{
		{
			Suffix: "qweight", DType: dtype.I32, Shape: []int64{int64(k / 8), int64(n)}, Uses: UsesCodes,
			Encode: func(dst []byte, r *quant.Int4Result) error { return quant.PackGPTQQWeight(dst, r.Codes, n, k) },
		},
		{
			Suffix: "qzeros", DType: dtype.I32, Shape: []int64{int64(groups), int64(n / 8)}, Uses: UsesNothing,
			Encode: func(dst []byte, _ *quant.Int4Result) error { return quant.GPTQSymQZeros(dst, groups, n) },
		},
		{
			Suffix: "scales", DType: dtype.F16, Shape: []int64{int64(groups), int64(n)}, Uses: UsesParams,
			Encode:  func(dst []byte, r *quant.Int4Result) error { return quant.PackGPTQScales(dst, r.Scales, n, groups) },
			Restore: func(r *quant.Int4Result, src []byte) error { return quant.UnpackGPTQScales(r.Scales, src, n, groups) },
		},
		{
			Suffix: "g_idx", DType: dtype.I32, Shape: []int64{int64(k)}, Uses: UsesNothing,
			Encode: func(dst []byte, _ *quant.Int4Result) error { return quant.PutGPTQGIdx(dst, k, g) },
		},
	}
}

// gptqReader reads a GPTQ v1 4-bit checkpoint back as vLLM's CPU path runs
// it (docs/formats.md#vllms-cpu-path): w = (q - 8) * scale per group (vLLM ignores qzeros
// and pins the zero at 8, so the reader refuses qzeros that say anything
// else), g_idx = k / g (desc_act false). A bf16 model runs the W4A8 kernel
// int4_scaled_mm_cpu, whose input is quantized to int8 per token by
// quantize_row_int8; an f16 or f32 model falls back to cpu_gemm_wna16 with
// activations in the model dtype.
type gptqReader struct {
	group     int
	quantHead bool
	act       dtype.DType
	float     excluded // modules a negative dynamic rule keeps float
}

func newGPTQReader(qc json.RawMessage, act dtype.DType) (formatReader, error) {
	var c struct {
		Bits    int                        `json:"bits"`
		Group   int                        `json:"group_size"`
		Sym     bool                       `json:"sym"`
		DescAct bool                       `json:"desc_act"`
		Format  string                     `json:"checkpoint_format"`
		Head    bool                       `json:"lm_head"`
		Dynamic map[string]json.RawMessage `json:"dynamic"`
	}
	if err := json.Unmarshal(qc, &c); err != nil {
		return nil, err
	}
	var float excluded
	for k := range c.Dynamic {
		if p, ok := strings.CutPrefix(k, "-:"); ok {
			if err := float.add(p, true); err != nil {
				return nil, fmt.Errorf("gptq dynamic: %w", err)
			}
		}
	}
	if c.Bits != 4 || !c.Sym || c.DescAct || c.Group <= 0 || c.Group%8 != 0 || (c.Format != "" && c.Format != "gptq") {
		return nil, fmt.Errorf("gptq: want bits 4, sym true, desc_act false, a group size that is a multiple of 8, checkpoint_format gptq; got bits %d, sym %v, desc_act %v, group_size %d, checkpoint_format %q",
			c.Bits, c.Sym, c.DescAct, c.Group, c.Format)
	}
	return gptqReader{group: c.Group, quantHead: c.Head, act: act, float: float}, nil
}

func (r gptqReader) describe() string {
	return fmt.Sprintf("GPTQ 4-bit g%d (%s)", r.group, cpuInt4Kernel(r.act, r.quantHead))
}

func (r gptqReader) parts(ck *safetensors.Checkpoint, s spark.TensorSpec) (bool, error) {
	if s.Kind != spark.KindLinear && (s.Kind != spark.KindHead || !r.quantHead) || s.Kind == spark.KindLinear && r.float.match(s.Module()) {
		return false, nil
	}
	mod, n, k := s.Module(), s.Shape[0], s.Shape[1]
	if k%int64(r.group) != 0 || n%8 != 0 {
		return true, fmt.Errorf("%s [%d, %d]: group %d does not divide K or N is not a multiple of 8", mod, n, k, r.group)
	}
	g := k / int64(r.group)
	for _, p := range []struct {
		suffix string
		dt     dtype.DType
		shape  []int64
	}{{"qweight", dtype.I32, []int64{k / 8, n}}, {"qzeros", dtype.I32, []int64{g, n / 8}}, {"scales", dtype.F16, []int64{g, n}}, {"g_idx", dtype.I32, []int64{k}}} {
		if err := checkPart(ck, mod+"."+p.suffix, p.dt, p.shape...); err != nil {
			return true, err
		}
	}
	return true, nil
}

func (r gptqReader) dequantize(ck *safetensors.Checkpoint, s spark.TensorSpec, dst []float32) (forward.Act, error) {
	mod, n, k := s.Module(), int(s.Shape[0]), int(s.Shape[1])
	raw := map[string][]byte{}
	for _, p := range []string{"qweight", "qzeros", "scales", "g_idx"} {
		_, b, err := ck.Raw(mod + "." + p)
		if err != nil {
			return forward.Act{}, err
		}
		raw[p] = b
	}
	groups := k / r.group
	zeros := make([]uint8, groups*n)
	if err := quant.UnpackGPTQQZeros(zeros, raw["qzeros"], groups, n); err != nil {
		return forward.Act{}, fmt.Errorf("%s.qzeros: %w", mod, err)
	}
	if i := slices.IndexFunc(zeros, func(z uint8) bool { return z != 8 }); i >= 0 {
		return forward.Act{}, fmt.Errorf("%s.qzeros: zero point %d at group %d, column %d: vLLM's CPU GPTQ path ignores qzeros and uses 8, so this checkpoint would not run as written", mod, zeros[i], i/n, i%n)
	}
	for kk := range k {
		if g := binary.LittleEndian.Uint32(raw["g_idx"][4*kk:]); int(g) != kk/r.group {
			return forward.Act{}, fmt.Errorf("%s.g_idx[%d] = %d, want %d (desc_act is false, so vLLM ignores g_idx and uses k / group_size)", mod, kk, g, kk/r.group)
		}
	}
	res := quant.Int4Result{N: n, K: k, Group: r.group, Codes: make([]uint8, n*k), Scales: make([]float32, n*groups)}
	if err := quant.UnpackGPTQQWeight(res.Codes, raw["qweight"], n, k); err != nil {
		return forward.Act{}, fmt.Errorf("%s.qweight: %w", mod, err)
	}
	if err := quant.UnpackGPTQScales(res.Scales, raw["scales"], n, groups); err != nil {
		return forward.Act{}, fmt.Errorf("%s.scales: %w", mod, err)
	}
	dequantizeInt4(&res, dst)
	return W4A8{}.InputAct(r.act), nil
}

func (gptqReader) release(ck *safetensors.Checkpoint, s spark.TensorSpec) {
	releaseParts(ck, s.Module(), "qweight", "qzeros", "scales", "g_idx")
}
