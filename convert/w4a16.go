package convert

// W4A16: torch's CPU tinygemm int4 (cpu_int4 checkpoints), the format
// W4A16 below declares (Convert writes it), documented in
// docs/formats.md#w4a16-tinygemm.

import (
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

// W4A16 is the tinygemm cpu_int4 output (a Format), with its options: the
// 5 linears of every layer (and the head with QuantHead) become qweight +
// scales_and_zeros; embeddings, norms and g_proj are copied bit for bit.
type W4A16 struct {
	Group     int    // 32, 64, 128 or 256
	Pack      string // "portable" (default), "avx512" or "avx2"
	QuantHead bool   // quantize the output head (untying it)
	NoSearch  bool   // plain min/max parameters instead of the MSE search
	// Chooser, if set, chooses the codes instead of round-to-nearest (on
	// the asymmetric grid; it must fill Codes, Scales and Zeros).
	Chooser CodeChooser
}

// Name is the scheme, "w4a16".
func (W4A16) Name() string { return "w4a16" }

// CheckFlags validates the option values (usage errors).
func (f W4A16) CheckFlags() error {
	if !slices.Contains(W4A16GroupSizes, f.Group) {
		return fmt.Errorf("--group %d: torch's _weight_int4pack_mm_for_cpu accepts group sizes %v", f.Group, W4A16GroupSizes)
	}
	if !slices.Contains(W4A16Packs, f.pack()) {
		return fmt.Errorf("--pack %q: want one of %s", f.Pack, strings.Join(W4A16Packs, ", "))
	}
	return nil
}

func (f W4A16) pack() string {
	if f.Pack == "" {
		return "portable"
	}
	return f.Pack
}

// chooser is the code chooser the options select.
func (f W4A16) chooser() CodeChooser {
	if f.Chooser != nil {
		return f.Chooser
	}
	return RTN{Kind: GridAsym4, Search: !f.NoSearch}
}

// Check refuses a model whose quantized linears the tinygemm kernel cannot
// take: K a multiple of the group size (and so even), N a multiple of 16
// (_convert_weight_to_int4pack_for_cpu checks N % 16 == 0). With --pack
// avx512 a last block of 16, 32 or 48 channels is fine: the kernel packs it
// as adjacent pairs (docs/formats.md#tinygemm-layout), and so do we.
func (f W4A16) Check(cfg *spark.Config) error {
	return CheckTargets("torch's CPU int4 kernel (_weight_int4pack_mm_for_cpu)", Targets(cfg, f.QuantHead), func(t Target) []string {
		var why []string
		if t.K%f.Group != 0 {
			why = append(why, fmt.Sprintf("--group %d does not divide K=%d (the kernel needs K %% group == 0; try a group size in %v that divides it)", f.Group, t.K, W4A16GroupSizes))
		}
		if t.N%16 != 0 {
			why = append(why, fmt.Sprintf("N=%d is not a multiple of 16 (_convert_weight_to_int4pack_for_cpu requires N %% 16 == 0)", t.N))
		}
		return why
	})
}

// Rounds reports whether the codes are rounded to nearest (no Chooser).
func (f W4A16) Rounds() bool { return f.Chooser == nil }

// MixedDTypes is false: scales and zeros are in the one activation dtype.
func (W4A16) MixedDTypes() bool { return false }

// Grid is tinygemm's asymmetric 4-bit grid, parameters in the activation
// dtype.
func (f W4A16) Grid(act dtype.DType) GridSpec {
	return GridSpec{Kind: GridAsym4, Group: f.Group, DType: ScaleDType(act), Search: !f.NoSearch}
}

// InputAct is tinygemm's input rule: the model's activation dtype (bf16
// for a bf16 model), no activation quantization.
func (W4A16) InputAct(act dtype.DType) forward.Act { return forward.Act{DType: act} }

// Targets are the 5 linears of every layer and, with QuantHead, the head.
func (f W4A16) Targets(cfg *spark.Config) []Target { return Targets(cfg, f.QuantHead) }

// Method names the chooser.
func (f W4A16) Method() string { return f.chooser().Method() }

// Settings are the 4-bit settings and the pack.
func (f W4A16) Settings(b *Build) map[string]any {
	s := int4Settings(b.Grid, f.QuantHead)
	s["pack"] = f.pack()
	return s
}

// Tensors are qweight and scales_and_zeros of every target (W4A16Parts),
// the rest copied.
func (f W4A16) Tensors(b *Build) ([]safetensors.Tensor, map[string]string) {
	return b.Int4Model(f.chooser(), func(t Target) []Int4Part { return W4A16Parts(t, b.Grid.Group, b.Grid.DType, f.pack()) })
}

// Config sets quantization_config (W4A16.QuantConfig).
func (f W4A16) Config(b *Build) map[string]any {
	return map[string]any{"quantization_config": f.QuantConfig(b.Job.Report.Calibration, b.Act, b.Job.Opt.Version)}
}

// QuantConfig is the quantization_config of a cpu_int4 checkpoint (documented
// in docs/formats.md#w4a16-tinygemm): every linear with a `qweight` is
// quantized; codes q in 0..15, w = (q - 8) * scale + zero per group of
// group_size consecutive input channels.
func (f W4A16) QuantConfig(cal *Calibration, actDType dtype.DType, version string) map[string]any {
	float := []string{"model.embed_tokens", "g_proj"}
	if !f.QuantHead {
		float = append(float, "lm_head")
	}
	qc := map[string]any{
		"quant_method":           "cpu_int4",
		"format_version":         1,
		"bits":                   4,
		"group_size":             f.Group,
		"sym":                    false,
		"zero_point_domain":      "float",
		"pack":                   f.pack(),
		"scales_dtype":           torchDTypeName(actDType),
		"lm_head":                f.QuantHead,
		"modules_to_not_convert": float,
		"kernel":                 "torch.ops.aten._weight_int4pack_mm_for_cpu (torch >= 2.6)",
		"meta": map[string]any{
			"quantizer": []string{"sparkconv:" + version},
			"method":    f.Method(),
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
	return W4A16{}.InputAct(r.act), nil
}

func (w4a16Reader) release(ck *safetensors.Checkpoint, s spark.TensorSpec) {
	releaseParts(ck, s.Module(), "qweight", "scales_and_zeros")
}
