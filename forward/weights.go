package forward

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"sparkconv/dtype"
	"sparkconv/kernels"
	"sparkconv/spark"
)

// Weights is where the forward reads a model's weights: the original
// bf16/f16/f32 checkpoint (CheckpointWeights) or a quantized output, whose
// reader lives beside its writer in package convert. Tensors are named as in
// the original checkpoint (model.layers.0.mlp.up_proj.weight, lm_head.weight),
// whatever the format stores.
type Weights interface {
	// Config is the model's config.json.
	Config() *spark.Config
	// Describe names the format in one line ("bf16 checkpoint", "GPTQ
	// W4A8 g128 ...").
	Describe() string
	// Float returns a tensor the format keeps in a float dtype: its
	// stored bytes and dtype. ok is false when the format quantized it.
	Float(name string) (dt dtype.DType, raw []byte, ok bool, err error)
	// Dequantize fills dst with the float32 values of a quantized tensor
	// [N, K] and returns how the format's runtime quantizes the input
	// activations of that linear.
	Dequantize(name string, dst []float32) (Act, error)
	// Release drops the pages of a tensor's stored data once widened.
	Release(name string)
	Close() error
}

// Int8Rule is how a runtime quantizes activations to int8, per token
// (one scale per row of the linear's input).
type Int8Rule int

// Activation int8 rules.
const (
	NoInt8 Int8Rule = iota
	// Int8Dynamic is W8A8's per-token dynamic symmetric int8: scale =
	// amax/127, q = rint(x/scale) (half to even), clamped to -127..127.
	Int8Dynamic
	// Int8VLLMRow is vLLM's quantize_row_int8 (sgl-kernels vec.h), the
	// input side of int4_scaled_mm_cpu (W4A8): amax floored at 1e-7,
	// scale = amax/127, q = std::round(x * (127/amax)) (half away from
	// zero).
	Int8VLLMRow
)

// Act is how a runtime feeds a linear's input: first rounded to DType (the
// model's activation dtype; "" or F32 keeps float32), then, with Int8, to
// int8 per token. The forward applies it as fake quantization (the values
// the integer kernel multiplies, times their scale) before a float32 GEMM.
type Act struct {
	DType dtype.DType
	Int8  Int8Rule
}

// None reports whether the input is used as float32 unchanged.
func (a Act) None() bool { return (a.DType == "" || a.DType == dtype.F32) && a.Int8 == NoInt8 }

// String describes the rule ("float32", "bf16", "bf16 -> int8 per token").
func (a Act) String() string {
	s := "float32"
	if a.DType != "" && a.DType != dtype.F32 {
		s = string(a.DType)
	}
	switch a.Int8 {
	case Int8Dynamic:
		s += " -> int8 per token (amax/127, half to even)"
	case Int8VLLMRow:
		s += " -> int8 per token (vLLM quantize_row_int8: amax/127, half away)"
	}
	return s
}

// Apply writes the quantized input x [rows, cols] into dst (same length).
func (a Act) Apply(dst, x []float32, cols int) {
	kernels.Parallel(len(x)/cols, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			a.row(dst[r*cols:(r+1)*cols], x[r*cols:(r+1)*cols])
		}
	})
}

func (a Act) row(dst, x []float32) {
	round := a.DType != "" && a.DType != dtype.F32
	var amax float32
	for i, v := range x {
		if round {
			v = dtype.Round(v, a.DType)
		}
		dst[i] = v
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	switch a.Int8 {
	case Int8Dynamic:
		if amax == 0 {
			return
		}
		s := amax / 127
		for i, v := range dst {
			q := min(max(float32(math.RoundToEven(float64(v/s))), -127), 127)
			dst[i] = q * s
		}
	case Int8VLLMRow:
		amax = max(amax, 1e-7)
		s, inv := amax/127, 127/amax
		for i, v := range dst {
			q := min(max(float32(math.Round(float64(v*inv))), -128), 127)
			dst[i] = q * s
		}
	}
}

// CheckpointWeights reads an original float checkpoint: every tensor is
// Float, nothing is quantized.
type CheckpointWeights struct{ *spark.Model }

// Config is the checkpoint's config.
func (c CheckpointWeights) Config() *spark.Config { return c.Model.Config }

// Describe names the checkpoint's dtype.
func (c CheckpointWeights) Describe() string {
	t, ok := c.Info(spark.EmbedName)
	if !ok {
		return "float checkpoint"
	}
	return fmt.Sprintf("%s checkpoint", t.DType)
}

// Float returns the stored tensor.
func (c CheckpointWeights) Float(name string) (dtype.DType, []byte, bool, error) {
	t, raw, err := c.Raw(name)
	if err != nil {
		return "", nil, false, err
	}
	return t.DType, raw, true, nil
}

// Dequantize fails: nothing in an original checkpoint is quantized.
func (c CheckpointWeights) Dequantize(name string, _ []float32) (Act, error) {
	return Act{}, fmt.Errorf("tensor %s is not quantized", name)
}

// Release drops the tensor's pages.
func (c CheckpointWeights) Release(name string) { c.Model.Release(name) }

// Close unmaps the checkpoint.
func (c CheckpointWeights) Close() error { return c.Model.Close() }

// widenTensor fills dst with the float32 values of a tensor of w, widened
// from its float dtype or dequantized, and returns its activation rule.
func widenTensor(w Weights, name string, dst []float32, release bool) (Act, error) {
	dt, raw, ok, err := w.Float(name)
	if err != nil {
		return Act{}, err
	}
	if !ok {
		act, err := w.Dequantize(name, dst)
		if err != nil {
			return Act{}, fmt.Errorf("tensor %s: %w", name, err)
		}
		if release {
			w.Release(name)
		}
		return act, nil
	}
	if err := widen(dst, raw, dt); err != nil {
		return Act{}, fmt.Errorf("tensor %s: %w", name, err)
	}
	if release {
		releasePages(raw)
	}
	return Act{}, nil
}

// bf16Tensor returns the named tensor of w as bf16 bits viewed in place
// (no copy) and its stored bytes, when w stores it in bf16 with n values;
// nil otherwise (other dtypes, quantized, or bytes that cannot be viewed
// as uint16: misaligned, or a big-endian host). Errors are left to the
// widening path, which reports them.
func bf16Tensor(w Weights, name string, n int) ([]uint16, []byte) {
	dt, raw, ok, err := w.Float(name)
	if err != nil || !ok || dt != dtype.BF16 || len(raw) != 2*n || n == 0 {
		return nil, nil
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%2 != 0 || binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(raw))), n), raw
}

// actIn returns the input a linear with rule a sees: x itself, or x
// quantized into the named scratch buffer.
func (m *Model) actIn(a Act, x []float32, cols int) []float32 {
	if a.None() {
		return x
	}
	q := m.scratch("actq", len(x))
	a.Apply(q, x, cols)
	return q
}
