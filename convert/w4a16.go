package convert

// W4A16: torch's CPU tinygemm int4 (cpu_int4 checkpoints), the format
// written by W4A16 below and documented in docs/formats.md#w4a16-tinygemm.

import (
	"context"
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

// W4A16GroupSizes are the group sizes _weight_int4pack_mm_for_cpu accepts.
var W4A16GroupSizes = []int{32, 64, 128, 256}

// W4A16Packs are the qweight layouts --pack may name.
var W4A16Packs = []string{"portable", "avx512", "avx2"}

// W4A16Options configure a W4A16 conversion.
type W4A16Options struct {
	Options
	Group     int    // 32, 64, 128 or 256
	Pack      string // "portable" (default), "avx512" or "avx2"
	QuantHead bool   // quantize the output head (untying it)
	NoSearch  bool   // plain min/max parameters instead of the MSE search
	// Chooser, if set, chooses the codes instead of round-to-nearest (on
	// the asymmetric grid; it must fill Codes, Scales and Zeros).
	Chooser CodeChooser
	// Solver, if set, chooses every code before writing (calibrated GPTQ).
	Solver Solver
}

// CheckFlags validates the flag values (usage errors).
func (o W4A16Options) CheckFlags() error {
	if !slices.Contains(W4A16GroupSizes, o.Group) {
		return fmt.Errorf("--group %d: torch's _weight_int4pack_mm_for_cpu accepts group sizes %v", o.Group, W4A16GroupSizes)
	}
	if !slices.Contains(W4A16Packs, o.pack()) {
		return fmt.Errorf("--pack %q: want one of %s", o.Pack, strings.Join(W4A16Packs, ", "))
	}
	return nil
}

func (o W4A16Options) pack() string {
	if o.Pack == "" {
		return "portable"
	}
	return o.Pack
}

// W4A16Chooser is the code chooser the options select.
func (o W4A16Options) W4A16Chooser() CodeChooser {
	if o.Chooser != nil {
		return o.Chooser
	}
	return RTN{Grid: GridAsym4, Search: !o.NoSearch}
}

// CheckW4A16Model refuses a model whose quantized linears the tinygemm
// kernel cannot take: K a multiple of the group size (and so even), N a
// multiple of 16 (_convert_weight_to_int4pack_for_cpu checks N % 16 == 0).
// With --pack avx512 a last block of 16, 32 or 48 channels is fine: the
// kernel packs it as adjacent pairs (docs/formats.md#tinygemm-layout), and so do we.
func CheckW4A16Model(cfg *spark.Config, o W4A16Options) error {
	return CheckTargets("torch's CPU int4 kernel (_weight_int4pack_mm_for_cpu)", Targets(cfg, o.QuantHead), func(t Target) []string {
		var why []string
		if t.K%o.Group != 0 {
			why = append(why, fmt.Sprintf("--group %d does not divide K=%d (the kernel needs K %% group == 0; try a group size in %v that divides it)", o.Group, t.K, W4A16GroupSizes))
		}
		if t.N%16 != 0 {
			why = append(why, fmt.Sprintf("N=%d is not a multiple of 16 (_convert_weight_to_int4pack_for_cpu requires N %% 16 == 0)", t.N))
		}
		return why
	})
}

// W4A16Config is the quantization_config of a cpu_int4 checkpoint (documented
// in docs/formats.md#w4a16-tinygemm): every linear with a `qweight` is
// quantized; codes q in 0..15, w = (q - 8) * scale + zero per group of
// group_size consecutive input channels.
func W4A16Config(o W4A16Options, cal *Calibration, actDType dtype.DType, version string) map[string]any {
	float := []string{"model.embed_tokens", "g_proj"}
	if !o.QuantHead {
		float = append(float, "lm_head")
	}
	qc := map[string]any{
		"quant_method":           "cpu_int4",
		"format_version":         1,
		"bits":                   4,
		"group_size":             o.Group,
		"sym":                    false,
		"zero_point_domain":      "float",
		"pack":                   o.pack(),
		"scales_dtype":           torchDTypeName(actDType),
		"lm_head":                o.QuantHead,
		"modules_to_not_convert": float,
		"kernel":                 "torch.ops.aten._weight_int4pack_mm_for_cpu (torch >= 2.6)",
		"meta": map[string]any{
			"quantizer": []string{"sparkconv:" + version},
			"method":    o.W4A16Chooser().Method(),
		},
	}
	if cal != nil {
		calMeta(qc["meta"].(map[string]any), cal)
	}
	return qc
}

func torchDTypeName(d dtype.DType) string {
	switch d {
	case dtype.BF16:
		return "bfloat16"
	case dtype.F16:
		return "float16"
	}
	return "float32"
}

// W4A16Parts are the tensors of one tinygemm linear: qweight uint8 [N, K/2]
// (portable or a kernel layout) and scales_and_zeros [K/g, N, 2] in dt.
func W4A16Parts(t Target, group int, dt quant.ScaleDType, pack string) []Int4Part {
	n, k, groups := t.N, t.K, t.K/group
	return []Int4Part{
		{
			Suffix: "qweight", DType: dtype.U8, Shape: []int64{int64(n), int64(k / 2)}, Uses: UsesCodes,
			Encode: func(dst []byte, r *quant.Int4Result) error { return PackW4A16Codes(dst, r.Codes, n, k, pack) },
		},
		{
			Suffix: "scales_and_zeros", DType: dtype.DType(dt.String()), Shape: []int64{int64(groups), int64(n), 2}, Uses: UsesParams,
			Encode: func(dst []byte, r *quant.Int4Result) error {
				return quant.PackTinygemmScalesZeros(dst, r.Scales, r.Zeros, n, groups, dt)
			},
			Restore: func(r *quant.Int4Result, src []byte) error {
				return quant.UnpackTinygemmScalesZeros(r.Scales, r.Zeros, src, n, groups, dt)
			},
		},
	}
}

// PackW4A16Codes packs codes [N, K] into qweight bytes in the named layout.
func PackW4A16Codes(dst []byte, codes []uint8, n, k int, pack string) error {
	switch pack {
	case "portable", "":
		return quant.PackTinygemm(dst, codes, n, k)
	case "avx512":
		return quant.PackTinygemmKernel(dst, codes, n, k, quant.LayoutAVX512)
	case "avx2":
		return quant.PackTinygemmKernel(dst, codes, n, k, quant.LayoutAVX2)
	}
	return fmt.Errorf("unknown tinygemm pack %q", pack)
}

// W4A16 converts a Spark checkpoint to the cpu_int4 format: the 5 linears
// of every layer (and the head with QuantHead) become qweight +
// scales_and_zeros; embeddings, norms and g_proj are copied bit for bit.
// The model is checked before anything is written.
func W4A16(ctx context.Context, o W4A16Options) (*Report, error) {
	if err := o.CheckFlags(); err != nil {
		return nil, err
	}
	cfg, err := spark.LoadConfig(o.Model)
	if err != nil {
		return nil, err
	}
	if err := CheckW4A16Model(cfg, o); err != nil {
		return nil, err
	}
	begin := Start
	if o.Solver == nil && o.Chooser == nil {
		begin = StartAsRead // round to nearest refuses NaN/Inf as it quantizes
	}
	j, err := begin(ctx, o.Options, "w4a16")
	if err != nil {
		return nil, err
	}
	defer j.Close()
	act, err := j.ActivationDType()
	if err != nil {
		return nil, err
	}
	chooser := o.W4A16Chooser()
	j.Report.Method = chooser.Method()
	j.Report.Settings = map[string]any{"group_size": o.Group, "pack": o.pack(), "search": !o.NoSearch, "quant_head": o.QuantHead, "scales_dtype": string(act)}
	sdt := ScaleDType(act)
	sol, err := j.solve(o.Solver, SolveSpec{GridSpec: GridSpec{Kind: GridAsym4, Group: o.Group, DType: sdt, Search: !o.NoSearch}, Targets: Targets(cfg, o.QuantHead)})
	if err != nil {
		return nil, err
	}
	if sol != nil {
		chooser = sol
	}
	tensors, src := j.Int4Model(Targets(cfg, o.QuantHead), func(t Target) Int4Spec {
		return Int4Spec{Target: t, Group: o.Group, ScaleDType: sdt, Chooser: chooser, Grid: GridAsym4, Parts: W4A16Parts(t, o.Group, sdt, o.pack())}
	})
	set := map[string]any{"quantization_config": W4A16Config(o, j.Report.Calibration, act, o.Version)}
	if o.QuantHead {
		set["tie_word_embeddings"] = false
	}
	return j.FinishInt4(tensors, src, set)
}

// w4a16Reader reads a cpu_int4 checkpoint back: w = (q - 8) * scale + zero
// per group, from any of the three qweight packs; tinygemm multiplies the
// activations in the model dtype (bf16 for a bf16 model), unquantized.
type w4a16Reader struct {
	group     int
	pack      string
	quantHead bool
	sdt       quant.ScaleDType
	act       dtype.DType
}

func newW4A16Reader(qc json.RawMessage, _ dtype.DType) (formatReader, error) {
	var c struct {
		Bits   int    `json:"bits"`
		Group  int    `json:"group_size"`
		Pack   string `json:"pack"`
		Scales string `json:"scales_dtype"`
		Head   bool   `json:"lm_head"`
		Domain string `json:"zero_point_domain"`
	}
	if err := json.Unmarshal(qc, &c); err != nil {
		return nil, err
	}
	if c.Bits != 4 || c.Domain != "float" || !slices.Contains(W4A16GroupSizes, c.Group) || !slices.Contains(W4A16Packs, c.Pack) {
		return nil, fmt.Errorf("cpu_int4: want bits 4, zero_point_domain float, group_size in %v and pack in %v; got bits %d, %q, group_size %d, pack %q",
			W4A16GroupSizes, W4A16Packs, c.Bits, c.Domain, c.Group, c.Pack)
	}
	r := w4a16Reader{group: c.Group, pack: c.Pack, quantHead: c.Head}
	switch c.Scales {
	case "bfloat16":
		r.sdt, r.act = quant.ScaleBF16, dtype.BF16
	case "float16":
		r.sdt, r.act = quant.ScaleF16, dtype.F16
	case "float32":
		r.sdt, r.act = quant.ScaleF32, dtype.F32
	default:
		return nil, fmt.Errorf("cpu_int4: scales_dtype %q is not bfloat16, float16 or float32", c.Scales)
	}
	return r, nil
}

func (r w4a16Reader) describe() string {
	head := ""
	if r.quantHead {
		head = ", quantized head"
	}
	return fmt.Sprintf("W4A16 (tinygemm cpu_int4 g%d, %s pack, %s activations%s)", r.group, r.pack, r.act, head)
}

func (r w4a16Reader) parts(ck *safetensors.Checkpoint, s spark.TensorSpec) (bool, error) {
	if s.Kind != spark.KindLinear && (s.Kind != spark.KindHead || !r.quantHead) {
		return false, nil
	}
	mod, n, k := s.Module(), s.Shape[0], s.Shape[1]
	if err := checkPart(ck, mod+".qweight", dtype.U8, n, k/2); err != nil {
		return true, err
	}
	return true, checkPart(ck, mod+".scales_and_zeros", dtype.DType(r.sdt.String()), k/int64(r.group), n, 2)
}

func (r w4a16Reader) dequantize(ck *safetensors.Checkpoint, s spark.TensorSpec, dst []float32) (forward.Act, error) {
	mod, n, k := s.Module(), int(s.Shape[0]), int(s.Shape[1])
	_, qw, err := ck.Raw(mod + ".qweight")
	if err != nil {
		return forward.Act{}, err
	}
	_, sz, err := ck.Raw(mod + ".scales_and_zeros")
	if err != nil {
		return forward.Act{}, err
	}
	groups := k / r.group
	res := quant.Int4Result{N: n, K: k, Group: r.group, Codes: make([]uint8, n*k), Scales: make([]float32, n*groups), Zeros: make([]float32, n*groups)}
	switch r.pack {
	case "avx512":
		err = quant.UnpackTinygemmKernel(res.Codes, qw, n, k, quant.LayoutAVX512)
	case "avx2":
		err = quant.UnpackTinygemmKernel(res.Codes, qw, n, k, quant.LayoutAVX2)
	default:
		err = quant.UnpackTinygemm(res.Codes, qw, n, k)
	}
	if err == nil {
		err = quant.UnpackTinygemmScalesZeros(res.Scales, res.Zeros, sz, n, groups, r.sdt)
	}
	if err != nil {
		return forward.Act{}, fmt.Errorf("%s: %w", mod, err)
	}
	dequantizeInt4(&res, dst)
	return forward.Act{DType: r.act}, nil
}

func (w4a16Reader) release(ck *safetensors.Checkpoint, s spark.TensorSpec) {
	releaseParts(ck, s.Module(), "qweight", "scales_and_zeros")
}
