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
// GPTQOptions.Chooser is nil).

import (
	"context"
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

// GPTQOptions configure a GPTQ-format conversion.
type GPTQOptions struct {
	Options
	Group     int  // 32, 64 or 128
	QuantHead bool // quantize the output head (untying it from the embedding)
	NoSearch  bool // absmax scales instead of the MSE search
	// Chooser, if set, chooses the codes instead of round-to-nearest (on
	// the symmetric grid; it must fill Codes and Scales).
	Chooser CodeChooser
	// Solver, if set, chooses every code before writing (calibrated GPTQ).
	Solver Solver
	// Keep, if set, are linears kept in float: copied, and excluded by a
	// negative dynamic rule.
	Keep *KeepFloat
}

// CheckFlags validates the flag values (usage errors).
func (o GPTQOptions) CheckFlags() error {
	if !slices.Contains(GPTQGroupSizes, o.Group) {
		return fmt.Errorf("--group %d: vLLM's CPU GPTQ path accepts group sizes %v", o.Group, GPTQGroupSizes)
	}
	return nil
}

// GPTQChooser is the chooser the options select.
func (o GPTQOptions) GPTQChooser() CodeChooser {
	if o.Chooser != nil {
		return o.Chooser
	}
	return RTN{Grid: GridSym4, Search: !o.NoSearch}
}

// vllmCPU names the target in refusals.
const vllmCPU = "vLLM's CPU GPTQ path (CPUWNA16LinearKernel / int4_scaled_mm_cpu)"

// CheckGPTQModel refuses a model vLLM's CPU path cannot load: per quantized
// linear K and N multiples of 32 (CPUWNA16LinearKernel.can_implement) and K
// a multiple of the group size; for a quantized head, a vocabulary that is
// a multiple of 64.
func CheckGPTQModel(cfg *spark.Config, o GPTQOptions) error {
	return CheckTargets(vllmCPU, Targets(cfg, o.QuantHead), func(t Target) []string {
		var why []string
		if t.K%32 != 0 {
			why = append(why, fmt.Sprintf("K=%d is not a multiple of 32 (the CPU kernel needs K %% 32 == 0)", t.K))
		}
		if t.N%32 != 0 {
			why = append(why, fmt.Sprintf("N=%d is not a multiple of 32 (the CPU kernel needs N %% 32 == 0)", t.N))
		}
		if t.K%o.Group != 0 {
			why = append(why, fmt.Sprintf("--group %d does not divide K=%d (choose a group size in %v that divides it)", o.Group, t.K, GPTQGroupSizes))
		}
		if t.Module == "lm_head" && t.N%64 != 0 {
			why = append(why, fmt.Sprintf("vocab_size %d is not a multiple of 64: vLLM pads the LM head's vocabulary to a multiple of 64 and copies the checkpoint into the padded parameter, which fails for a packed qweight [K/8, vocab]; drop --quant-head", t.N))
		}
		return why
	})
}

// GPTQConfig is the quantization_config: GPTQ v1, 4 bits, symmetric,
// desc_act false (g_idx is always k/g: vLLM's W4A8 kernel refuses
// desc_act), g_proj kept in float through a negative `dynamic` rule, and
// what really chose the codes in meta. Without calibration (cal nil) no
// Hessian step ran, so damp_percent is not written (transformers would
// reject 0 and any other value would be made up) and true_sequential and
// static_groups are false; with it, they say what the solve did and meta
// names the calibration text (sha256, samples, tokens).
func GPTQConfig(o GPTQOptions, cal *Calibration, version string) map[string]any {
	mse := 0.0
	if !o.NoSearch && o.Chooser == nil {
		mse = 2.0 // squared error, GPTQModel's `mse` norm exponent
	}
	meta := map[string]any{
		"quantizer":   []string{"sparkconv:" + version},
		"method":      o.GPTQChooser().Method(),
		"calibration": "none",
		"mse":         mse,
	}
	dynamic := map[string]any{"-:.*g_proj": map[string]any{}}
	o.Keep.gptqDynamic(dynamic)
	if kept := o.Keep.Modules(); kept != nil {
		meta["keep_float"] = kept
	}
	qc := map[string]any{
		"quant_method":      "gptq",
		"checkpoint_format": "gptq",
		"bits":              4,
		"group_size":        o.Group,
		"sym":               true,
		"desc_act":          false,
		"lm_head":           o.QuantHead,
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

// calMeta records a calibration in a config's meta.
func calMeta(meta map[string]any, cal *Calibration) {
	meta["method"] = cal.Method
	meta["calibration"] = map[string]any{
		"sources": cal.Sources, "sha256": cal.SHA256, "samples": cal.Samples, "tokens": cal.Tokens,
		"hessian_tokens": cal.HessianTokens, "token_budget": cal.TokenBudget, "seq_len": cal.SeqLen,
	}
	meta["damp_percent"] = cal.DampPercent
	meta["act_order"] = cal.ActOrder
	meta["static_groups"] = cal.StaticGroups
	meta["true_sequential"] = cal.TrueSequential
	meta["sequential"] = cal.Sequential
	meta["kernels"] = cal.Kernels
	fb := []string{}
	for _, f := range cal.Fallbacks {
		fb = append(fb, f.Module+": "+f.Method)
	}
	meta["fallbacks"] = fb
	rd := []string{}
	for _, d := range cal.Redamped {
		rd = append(rd, fmt.Sprintf("%s: %g", d.Module, d.DampPercent))
	}
	meta["redamped"] = rd
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

// GPTQ converts the model in o.Model to a GPTQ W4A8 checkpoint in o.Out.
// The flags and the model are checked before anything is written.
func GPTQ(ctx context.Context, o GPTQOptions) (*Report, error) {
	if err := o.CheckFlags(); err != nil {
		return nil, err
	}
	cfg, err := spark.LoadConfig(o.Model)
	if err != nil {
		return nil, err
	}
	if err := CheckGPTQModel(cfg, o); err != nil {
		return nil, err
	}
	if err := o.Keep.check(cfg); err != nil {
		return nil, err
	}
	begin := Start
	if o.Solver == nil && o.Chooser == nil {
		begin = StartAsRead // round to nearest refuses NaN/Inf as it quantizes
	}
	j, err := begin(ctx, o.Options, "gptq")
	if err != nil {
		return nil, err
	}
	defer j.Close()
	chooser := o.GPTQChooser()
	j.Report.Method = chooser.Method()
	j.Report.Settings = map[string]any{"group_size": o.Group, "search": !o.NoSearch, "quant_head": o.QuantHead, "scales_dtype": "F16"}
	act, err := j.ActivationDType()
	if err != nil {
		return nil, err
	}
	if act != dtype.BF16 {
		j.Report.Settings["warning"] = fmt.Sprintf("the model's linears are %s: vLLM runs the W4A8 kernel only for bf16 models and will use its W4A16 path (cpu_gemm_wna16) instead", act)
	}
	targets := o.Keep.without(Targets(cfg, o.QuantHead))
	sol, err := j.solve(o.Solver, SolveSpec{GridSpec: GridSpec{Kind: GridSym4, Group: o.Group, DType: quant.ScaleF16, Search: !o.NoSearch}, Targets: targets})
	if err != nil {
		return nil, err
	}
	if sol != nil {
		chooser = sol
	}
	o.Keep.report(j.Report)
	tensors, src := j.Int4Model(targets, func(t Target) Int4Spec {
		return Int4Spec{Target: t, Group: o.Group, ScaleDType: quant.ScaleF16, Chooser: chooser, Grid: GridSym4, Parts: GPTQParts(t, o.Group)}
	})
	set := map[string]any{"quantization_config": GPTQConfig(o, j.Report.Calibration, o.Version), KeepFloatKey: o.Keep.config()}
	if o.QuantHead {
		set["tie_word_embeddings"] = false
	}
	return j.FinishInt4(tensors, src, set)
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

// w4a8 reports whether vLLM runs the W4A8 kernel (bf16 model).
func (r gptqReader) w4a8() bool { return r.act == dtype.BF16 }

func (r gptqReader) describe() string {
	kernel := "W4A8, int8 per-token activations"
	if !r.w4a8() {
		kernel = fmt.Sprintf("W4A16 path for a %s model", r.act)
	}
	head := ""
	if r.quantHead {
		head = ", quantized head"
	}
	return fmt.Sprintf("GPTQ 4-bit g%d (%s%s)", r.group, kernel, head)
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
	if r.w4a8() {
		return forward.Act{DType: dtype.BF16, Int8: forward.Int8VLLMRow}, nil
	}
	return forward.Act{DType: r.act}, nil
}

func (gptqReader) release(ck *safetensors.Checkpoint, s spark.TensorSpec) {
	releaseParts(ck, s.Module(), "qweight", "qzeros", "scales", "g_idx")
}
