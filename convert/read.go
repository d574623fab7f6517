package convert

// Reading sparkconv's outputs back: OpenWeights picks the reader of the
// checkpoint's format from config.json's quantization_config.quant_method.
// Each format's reader sits in the file of its writer (w8a8.go, w4a16.go,
// gptq.go, w4a8zp.go) and implements formatReader; this file holds what they share:
// opening the folder, checking every tensor the config implies is there
// (in a float dtype or as the format's parts), and the float tensors the
// formats copy.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"sparkconv/dtype"
	"sparkconv/forward"
	"sparkconv/infile"
	"sparkconv/kernels"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// formatReader decodes one format's quantized tensors.
type formatReader interface {
	// describe names the format and its settings.
	describe() string
	// quantized reports whether the original tensor (spec) is stored
	// quantized, and if so checks its parts: nil, nil for a float tensor.
	parts(ck *safetensors.Checkpoint, s spark.TensorSpec) (quantized bool, err error)
	// dequantize fills dst [N*K] with the weights of the quantized tensor s.
	dequantize(ck *safetensors.Checkpoint, s spark.TensorSpec, dst []float32) (forward.Act, error)
	// release drops the pages of s's parts.
	release(ck *safetensors.Checkpoint, s spark.TensorSpec)
}

// newReader builds a format's reader from its quantization_config and the
// checkpoint's activation dtype.
type newReader func(qc json.RawMessage, act dtype.DType) (formatReader, error)

// readers are the formats OpenWeights reads, by quant_method.
var readers = map[string]newReader{
	"compressed-tensors": newCompressedTensorsReader,
	"cpu_int4":           newW4A16Reader,
	"gptq":               newGPTQReader,
}

// QuantWeights is an opened quantized sparkconv output (forward.Weights).
type QuantWeights struct {
	dir    string
	cfg    *spark.Config
	ck     *safetensors.Checkpoint
	format formatReader
	specs  map[string]spark.TensorSpec // quantized tensors by original name
}

// OpenForward opens any checkpoint OpenWeights reads for the reference
// forward.
func OpenForward(dir string, opt forward.Options) (*forward.Model, error) {
	w, err := OpenWeights(dir)
	if err != nil {
		return nil, err
	}
	m, err := forward.NewWeights(w, opt)
	if err != nil {
		w.Close()
		return nil, err
	}
	return m, nil
}

// OpenWeights opens any checkpoint sparkconv reads or writes: an original
// float checkpoint (spark.Open) or a quantized output, every tensor checked
// against config.json.
func OpenWeights(dir string) (forward.Weights, error) {
	cfg, err := spark.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if cfg.QuantMethod == "" {
		sm, err := spark.Open(dir)
		if err != nil {
			return nil, err
		}
		return forward.CheckpointWeights{Model: sm}, nil
	}
	mk, ok := readers[cfg.QuantMethod]
	if !ok {
		known := make([]string, 0, len(readers))
		for k := range readers {
			known = append(known, k)
		}
		slices.Sort(known)
		return nil, fmt.Errorf("%s: quantization_config.quant_method %q is not a format sparkconv reads (%s)", dir, cfg.QuantMethod, strings.Join(known, ", "))
	}
	qc, err := rawQuantConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	w := &QuantWeights{dir: dir, cfg: cfg, ck: ck, specs: map[string]spark.TensorSpec{}}
	if err := w.open(mk, qc); err != nil {
		ck.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return w, nil
}

func rawQuantConfig(dir string) (json.RawMessage, error) {
	data, err := infile.ReadFile(filepath.Join(dir, spark.ConfigFile), infile.ConfigMax)
	if err != nil {
		return nil, err
	}
	var c struct {
		QC json.RawMessage `json:"quantization_config"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", spark.ConfigFile, err)
	}
	return c.QC, nil
}

// open builds the format reader and checks every tensor.
func (w *QuantWeights) open(mk newReader, qc json.RawMessage) error {
	ei, ok := w.ck.Info(spark.EmbedName)
	if !ok || !ei.DType.IsFloat() {
		return fmt.Errorf("missing float tensor %s", spark.EmbedName)
	}
	f, err := mk(qc, ei.DType)
	if err != nil {
		return fmt.Errorf("quantization_config: %w", err)
	}
	w.format = f
	var problems []string
	for _, s := range w.cfg.Tensors() {
		q, err := f.parts(w.ck, s)
		switch {
		case err != nil:
			problems = append(problems, err.Error())
		case q:
			w.specs[s.Name] = s
		default:
			problems = append(problems, checkFloat(w.ck, s)...)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s checkpoint does not match config.json (%d problems):\n  %s", f.describe(), len(problems), strings.Join(problems, "\n  "))
	}
	return nil
}

// checkFloat checks a tensor the format keeps in float.
func checkFloat(ck *safetensors.Checkpoint, s spark.TensorSpec) []string {
	t, ok := ck.Info(s.Name)
	switch {
	case !ok:
		return []string{fmt.Sprintf("missing tensor %s, expected shape %v", s.Name, s.Shape)}
	case !slices.Equal(t.Shape, s.Shape):
		return []string{fmt.Sprintf("tensor %s has shape %v, expected %v", s.Name, t.Shape, s.Shape)}
	case !t.DType.IsFloat():
		return []string{fmt.Sprintf("tensor %s has dtype %s, expected BF16, F16 or F32", s.Name, t.DType)}
	}
	return nil
}

// checkPart checks one stored part of a quantized tensor.
func checkPart(ck *safetensors.Checkpoint, name string, dt dtype.DType, shape ...int64) error {
	t, ok := ck.Info(name)
	switch {
	case !ok:
		return fmt.Errorf("missing tensor %s, expected %s%v", name, dt, shape)
	case t.DType != dt || !slices.Equal(t.Shape, shape):
		return fmt.Errorf("tensor %s is %s%v, expected %s%v", name, t.DType, t.Shape, dt, shape)
	}
	return nil
}

// Config is the checkpoint's config.json.
func (w *QuantWeights) Config() *spark.Config { return w.cfg }

// Describe names the format.
func (w *QuantWeights) Describe() string { return w.format.describe() }

// Float returns a tensor the format copied in float.
func (w *QuantWeights) Float(name string) (dtype.DType, []byte, bool, error) {
	if _, q := w.specs[name]; q {
		return "", nil, false, nil
	}
	t, raw, err := w.ck.Raw(name)
	if err != nil {
		return "", nil, false, err
	}
	return t.DType, raw, true, nil
}

// Dequantize decodes a quantized tensor.
func (w *QuantWeights) Dequantize(name string, dst []float32) (forward.Act, error) {
	s, ok := w.specs[name]
	if !ok {
		return forward.Act{}, fmt.Errorf("tensor %s is not quantized in this checkpoint", name)
	}
	if n := int(s.Shape[0] * s.Shape[1]); len(dst) != n {
		return forward.Act{}, fmt.Errorf("tensor %s: %d values asked, it has %d", name, len(dst), n)
	}
	return w.format.dequantize(w.ck, s, dst)
}

// Release drops the pages of a tensor (its parts when quantized).
func (w *QuantWeights) Release(name string) {
	if s, ok := w.specs[name]; ok {
		w.format.release(w.ck, s)
		return
	}
	w.ck.Release(name)
}

// Close unmaps the checkpoint.
func (w *QuantWeights) Close() error { return w.ck.Close() }

// releaseParts drops the pages of module.suffix for each suffix.
func releaseParts(ck *safetensors.Checkpoint, module string, suffixes ...string) {
	for _, s := range suffixes {
		ck.Release(module + "." + s)
	}
}

// dequantizeInt4 writes r's weights [N*K] into dst on all cores.
func dequantizeInt4(r *quant.Int4Result, dst []float32) {
	kernels.Parallel(r.N, func(lo, hi int) {
		sub := *r
		sub.N = hi - lo
		gpr := r.K / r.Group
		sub.Codes = r.Codes[lo*r.K : hi*r.K]
		sub.Scales = r.Scales[lo*gpr : hi*gpr]
		if r.Zeros != nil {
			sub.Zeros = r.Zeros[lo*gpr : hi*gpr]
		}
		sub.Dequantize(dst[lo*r.K : hi*r.K])
	})
}
