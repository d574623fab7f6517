package spark

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"sparkconv/infile"
	"sparkconv/safetensors"
)

// Tensor names of a Spark checkpoint.
const (
	EmbedName = "model.embed_tokens.weight"
	NormName  = "model.norm.weight"
	HeadName  = "lm_head.weight"
)

// The per-layer modules, relative to model.layers.{i}.
const (
	InputNorm = "input_layernorm"
	QKV       = "self_attn.q_k_v_proj"
	GateProj  = "self_attn.g_proj" // the head-wise output gate
	OProj     = "self_attn.o_proj"
	PostNorm  = "post_attention_layernorm"
	MLPGate   = "mlp.gate_proj"
	MLPUp     = "mlp.up_proj"
	MLPDown   = "mlp.down_proj"
)

// QuantLinears are the 5 large linears of every layer that the weight
// formats quantize (g_proj stays in full precision everywhere).
var QuantLinears = []string{QKV, OProj, MLPGate, MLPUp, MLPDown}

// Kind classifies a tensor for the converters.
type Kind int

// Tensor kinds.
const (
	KindEmbedding Kind = iota
	KindNorm
	KindLinear // one of QuantLinears
	KindGate   // g_proj
	KindHead   // lm_head (untied)
)

// TensorSpec is one tensor a checkpoint must hold.
type TensorSpec struct {
	Name  string
	Shape []int64
	Kind  Kind
	Layer int // -1 for model-level tensors
}

// Module is the name without ".weight" (the prefix of quantized tensors).
func (s TensorSpec) Module() string { return strings.TrimSuffix(s.Name, ".weight") }

// LayerModule returns "model.layers.{i}.{module}".
func LayerModule(i int, module string) string {
	return fmt.Sprintf("model.layers.%d.%s", i, module)
}

// LayerWeight returns "model.layers.{i}.{module}.weight".
func LayerWeight(i int, module string) string { return LayerModule(i, module) + ".weight" }

// HeadWeight names the tensor the output head reads: lm_head.weight when
// untied, the embedding when tied.
func (c *Config) HeadWeight() string {
	if c.TieWordEmbeddings {
		return EmbedName
	}
	return HeadName
}

// Tensors lists every tensor the config implies, in checkpoint order
// (embedding, layers, final norm, head).
func (c *Config) Tensors() []TensorSpec {
	h, inter := int64(c.HiddenSize), int64(c.IntermediateSize)
	qkv := int64(c.QDim() + 2*c.KVDim())
	specs := []TensorSpec{{EmbedName, []int64{int64(c.VocabSize), h}, KindEmbedding, -1}}
	for i := range c.NumLayers {
		add := func(m string, k Kind, shape ...int64) {
			specs = append(specs, TensorSpec{LayerWeight(i, m), shape, k, i})
		}
		add(InputNorm, KindNorm, h)
		add(QKV, KindLinear, qkv, h)
		add(GateProj, KindGate, int64(c.NumHeads), h)
		add(OProj, KindLinear, h, int64(c.QDim()))
		add(PostNorm, KindNorm, h)
		add(MLPGate, KindLinear, inter, h)
		add(MLPUp, KindLinear, inter, h)
		add(MLPDown, KindLinear, h, inter)
	}
	specs = append(specs, TensorSpec{NormName, []int64{h}, KindNorm, -1})
	if !c.TieWordEmbeddings {
		specs = append(specs, TensorSpec{HeadName, []int64{int64(c.VocabSize), h}, KindHead, -1})
	}
	return specs
}

// shapeNote explains how an expected shape follows from the config.
func (c *Config) shapeNote(s TensorSpec) string {
	switch {
	case strings.HasSuffix(s.Name, QKV+".weight"):
		return fmt.Sprintf(" (rows = num_attention_heads*head_dim + 2*num_key_value_heads*head_dim = %d*%d + 2*%d*%d)", c.NumHeads, c.HeadDim, c.NumKVHeads, c.HeadDim)
	case strings.HasSuffix(s.Name, OProj+".weight"):
		return fmt.Sprintf(" (in = num_attention_heads*head_dim = %d*%d)", c.NumHeads, c.HeadDim)
	case strings.HasSuffix(s.Name, GateProj+".weight"):
		return " (rows = num_attention_heads)"
	}
	return ""
}

// maxListed caps the problems CheckTensors lists one by one.
const maxListed = 64

// CheckTensors compares a checkpoint with the config and reports every
// missing, unexpected, mis-shaped or non-float tensor at once.
func (c *Config) CheckTensors(ck *safetensors.Checkpoint) error {
	var problems []string
	want := map[string]bool{}
	for _, s := range c.Tensors() {
		want[s.Name] = true
		t, ok := ck.Info(s.Name)
		if !ok {
			problems = append(problems, fmt.Sprintf("missing tensor %s, expected shape %v", s.Name, s.Shape))
			continue
		}
		if !slices.Equal(t.Shape, s.Shape) {
			problems = append(problems, fmt.Sprintf("tensor %s has shape %v, expected %v%s", s.Name, t.Shape, s.Shape, c.shapeNote(s)))
		}
		if !t.DType.IsFloat() {
			problems = append(problems, fmt.Sprintf("tensor %s has dtype %s, expected BF16, F16 or F32", s.Name, t.DType))
		}
	}
	var extra []string
	for _, n := range ck.Names() {
		if !want[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	for _, n := range extra {
		note := ""
		if n == HeadName && c.TieWordEmbeddings {
			note = " (config has tie_word_embeddings: true)"
		}
		problems = append(problems, fmt.Sprintf("unexpected tensor %s%s", n, note))
	}
	if len(problems) == 0 {
		return nil
	}
	n := len(problems)
	if n > maxListed { // a config for far more layers than the checkpoint has
		problems = append(problems[:maxListed], fmt.Sprintf("... and %d more", n-maxListed))
	}
	plural := "s"
	if n == 1 {
		plural = ""
	}
	return fmt.Errorf("%s: checkpoint does not match config.json (%d problem%s):\n  %s", ck.Dir, n, plural, strings.Join(problems, "\n  "))
}

// Model is an opened, validated Spark checkpoint folder. Its config.json
// is read once (ConfigJSON): whoever writes a config for an output derives
// it from these bytes, never from the folder again, so a folder replaced
// during a run cannot mix into it. Raw and Float32 refuse a tensor holding
// NaN or Inf, naming it, the first time it is read.
type Model struct {
	Dir        string
	Config     *Config
	ConfigJSON []byte
	*safetensors.Checkpoint
	configStamp infile.Stamp
	finite      sync.Map // tensor name -> error (nil when finite)
}

// QuantizedError is Open's refusal of a quantized checkpoint: the commands
// that read the original weights (the converters, calibrate, export-onnx)
// cannot start from a quantized one.
type QuantizedError struct {
	Dir    string
	Method string // quantization_config.quant_method
}

// quantFormats names the formats sparkconv writes, by quant_method.
var quantFormats = map[string]string{
	"gptq":               "a GPTQ 4-bit checkpoint (W4A8 for vLLM's CPU kernel)",
	"compressed-tensors": "a compressed-tensors checkpoint (int8 W8A8 or int4 with zero points)",
	"cpu_int4":           "a tinygemm W4A16 (cpu_int4) checkpoint",
}

func (e *QuantizedError) Error() string {
	what, ok := quantFormats[e.Method]
	if !ok {
		what = fmt.Sprintf("a quantized checkpoint (quant_method %q)", e.Method)
	}
	return fmt.Sprintf("%s is %s; give the original bf16/f16/f32 checkpoint it was made from (forward and eval read quantized outputs)", e.Dir, what)
}

// Open loads config.json, opens the safetensors files and checks every
// tensor against the config. Tensor data stays on disk (memory-mapped).
func Open(dir string) (*Model, error) {
	cfg, data, stamp, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	if cfg.QuantMethod != "" {
		return nil, &QuantizedError{Dir: dir, Method: cfg.QuantMethod}
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(cfg.checkCapacity(ck), cfg.CheckTensors(ck)); err != nil {
		ck.Close()
		return nil, err
	}
	// config.json and the shards must be one checkpoint: the config must
	// not have been replaced while the shards were opened.
	if err := stamp.Check(); err != nil {
		ck.Close()
		return nil, err
	}
	return &Model{Dir: dir, Config: cfg, ConfigJSON: data, Checkpoint: ck, configStamp: stamp}, nil
}

// checkCapacity refuses a config that asks for more layers than the
// checkpoint holds tensors for: a summary beside CheckTensors' list of
// each missing tensor (num_hidden_layers is capped by ParseConfig, so the
// list is bounded).
func (c *Config) checkCapacity(ck *safetensors.Checkpoint) error {
	perLayer := 8
	if need := perLayer*c.NumLayers + 2; need > len(ck.Names()) {
		return fmt.Errorf("%s: config.json field num_hidden_layers = %d needs at least %d tensors, the checkpoint holds %d (room for at most %d layers)",
			ck.Dir, c.NumLayers, need, len(ck.Names()), max(0, (len(ck.Names())-2)/perLayer))
	}
	return nil
}

// Unchanged reports an error naming the first input file that changed
// since Open: a shard written to or truncated in place.
func (m *Model) Unchanged() error { return m.Checkpoint.Unchanged() }

// Raw returns the tensor's bytes (a read-only slice of the mapping). A
// float tensor is scanned for NaN/Inf the first time it is read.
func (m *Model) Raw(name string) (safetensors.TensorInfo, []byte, error) {
	t, raw, err := m.Checkpoint.Raw(name)
	if err != nil {
		return t, nil, err
	}
	if err := m.checkFinite(name); err != nil {
		return t, nil, err
	}
	return t, raw, nil
}

// Float32 decodes a float tensor into a new float32 slice, refusing
// NaN/Inf as Raw does.
func (m *Model) Float32(name string) (safetensors.TensorInfo, []float32, error) {
	if _, _, err := m.Raw(name); err != nil {
		return safetensors.TensorInfo{}, nil, err
	}
	return m.Checkpoint.Float32(name)
}

func (m *Model) checkFinite(name string) error {
	if v, ok := m.finite.Load(name); ok {
		err, _ := v.(error)
		return err
	}
	err := m.Checkpoint.CheckFinite(name)
	if err != nil {
		err = fmt.Errorf("%s: %w", m.File(name), err)
	}
	m.finite.Store(name, err)
	return err
}

// CheckFinite scans every tensor for NaN/Inf and names each one found.
func (m *Model) CheckFinite() error {
	var errs []error
	for _, n := range m.Names() {
		if _, _, err := m.Raw(n); err != nil {
			if errors.Is(err, infile.ErrChanged) {
				return err
			}
			errs = append(errs, err)
		}
		m.Release(n) // keep the resident set at one tensor, not the model
	}
	return errors.Join(errs...)
}
