// Package spark is the Spark-X2.5 model definition: config.json in both RoPE
// spellings, the layer-type map, the tensor names and shapes a checkpoint
// must hold, and the checks that refuse a wrong checkpoint loudly.
package spark

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"sparkconv/infile"
)

// LayerType is an entry of config.json's layer_types.
type LayerType string

// The two attention kinds of the hybrid model.
const (
	Sliding LayerType = "sliding_attention"
	Full    LayerType = "full_attention"
)

// RoPE is one layer type's rotary embedding.
type RoPE struct {
	Theta               float64 `json:"rope_theta"`
	PartialRotaryFactor float64 `json:"partial_rotary_factor"`
}

// Config is the part of config.json the converter uses, normalized: both
// RoPE spellings give the same Config, and LayerTypes is always filled.
type Config struct {
	ModelType             string      `json:"model_type"`
	VocabSize             int         `json:"vocab_size"`
	HiddenSize            int         `json:"hidden_size"`
	IntermediateSize      int         `json:"intermediate_size"`
	NumLayers             int         `json:"num_hidden_layers"`
	NumHeads              int         `json:"num_attention_heads"`
	NumKVHeads            int         `json:"num_key_value_heads"`
	HeadDim               int         `json:"head_dim"`
	HiddenAct             string      `json:"hidden_act"`
	RMSNormEps            float64     `json:"rms_norm_eps"`
	MaxPositionEmbeddings int         `json:"max_position_embeddings"`
	TieWordEmbeddings     bool        `json:"tie_word_embeddings"`
	SlidingWindow         int         `json:"sliding_window"`
	LayerTypes            []LayerType `json:"layer_types"`
	FullRoPE              RoPE        `json:"full_rope"`
	SlidingRoPE           RoPE        `json:"sliding_rope"`
	// RoPESpelling is "flat" or "rope_parameters": how config.json said it.
	RoPESpelling string `json:"rope_spelling"`
	// LayerTypesDerived is true when layer_types was absent and derived
	// from the 3 sliding + 1 full pattern.
	LayerTypesDerived bool `json:"layer_types_derived"`
	// QuantMethod is quantization_config.quant_method ("" for an original
	// float checkpoint; "gptq", "compressed-tensors", "cpu_int4", ...).
	QuantMethod string `json:"quant_method,omitempty"`
}

// ConfigFile is the config file name in a model folder.
const ConfigFile = "config.json"

// LoadConfig reads and validates dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	c, _, _, err := readConfig(dir)
	return c, err
}

// readConfig reads dir/config.json once (a regular file under
// infile.ConfigMax) and returns it parsed, as bytes, and its stamp.
func readConfig(dir string) (*Config, []byte, infile.Stamp, error) {
	path := filepath.Join(dir, ConfigFile)
	data, stamp, err := infile.ReadStamped(path, infile.ConfigMax)
	if err != nil {
		return nil, nil, stamp, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, nil, stamp, fmt.Errorf("%s: %w", path, err)
	}
	return c, data, stamp, nil
}

// Limits on config sizes: far above any real model (Spark-X2.5-1.7B has
// vocab 151936, hidden 2048, 28 layers), low enough that nothing derived
// from them (layer lists, tensor shapes, byte counts) can overflow an int64
// or allocate gigabytes before the checkpoint is checked against them.
var sizeLimits = map[string]int{
	"vocab_size":          1 << 24,
	"hidden_size":         1 << 18,
	"intermediate_size":   1 << 20,
	"num_hidden_layers":   MaxLayers,
	"num_attention_heads": 1 << 12,
	"num_key_value_heads": 1 << 12,
	"head_dim":            1 << 14,
}

// MaxLayers caps num_hidden_layers.
const MaxLayers = 1 << 12

// MaxPositions caps max_position_embeddings and sliding_window (2^30
// tokens).
const MaxPositions = 1 << 30

// MaxContext caps every context a command runs or exports (export-onnx
// --context, eval --ctx): 16384 tokens, four times the 4096 AI Hub's LLM
// exports use by default. The advertised max_position_embeddings (1048576
// on Spark-X2.5) sizes nothing: the decode-step graphs' full-attention
// caches alone take context x 28 KiB on Spark in float32, 448 MiB at
// 16384, and eval's window and qnn-bundle's captures grow with it too
// (1.2 GB on the tiny fixture at 16384, 2.5 GB at 32768).
const MaxContext = 1 << 14

// MaxContextWhy is the reason MaxContext gives in messages.
const MaxContextWhy = "no deployment needs more: AI Hub's LLM exports use 4096; Spark's full-attention caches take 28 KiB a position in float32, 448 MiB at 16384"

// HFConfig is config.json as a Spark checkpoint writes it (flat RoPE
// keys, the ids and dtype transformers adds): the writer's form of what
// ParseConfig reads (synthetic's fixtures).
type HFConfig struct {
	Architectures         []string `json:"architectures"`
	ModelType             string   `json:"model_type"`
	VocabSize             int      `json:"vocab_size"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	HeadDim               int      `json:"head_dim"`
	HiddenAct             string   `json:"hidden_act"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	SlidingWindow         int      `json:"sliding_window"`
	LayerTypes            []string `json:"layer_types"`
	RopeTheta             float64  `json:"rope_theta"`
	PartialRotaryFactor   float64  `json:"partial_rotary_factor"`
	SlidingRopeTheta      float64  `json:"sliding_rope_theta"`
	SlidingPartialRotary  float64  `json:"sliding_partial_rotary_factor"`
	AttentionBias         bool     `json:"attention_bias"`
	BosTokenID            int      `json:"bos_token_id"`
	EosTokenID            int      `json:"eos_token_id"`
	PadTokenID            int      `json:"pad_token_id"`
	TorchDtype            string   `json:"torch_dtype"`
	TransformersVersion   string   `json:"transformers_version"`
}

// rawConfig mirrors config.json with pointers, to tell absent from zero.
type rawConfig struct {
	ModelType             *string          `json:"model_type"`
	VocabSize             *int             `json:"vocab_size"`
	HiddenSize            *int             `json:"hidden_size"`
	IntermediateSize      *int             `json:"intermediate_size"`
	NumLayers             *int             `json:"num_hidden_layers"`
	NumHeads              *int             `json:"num_attention_heads"`
	NumKVHeads            *int             `json:"num_key_value_heads"`
	HeadDim               *int             `json:"head_dim"`
	HiddenAct             *string          `json:"hidden_act"`
	RMSNormEps            *float64         `json:"rms_norm_eps"`
	MaxPositionEmbeddings *int             `json:"max_position_embeddings"`
	TieWordEmbeddings     *bool            `json:"tie_word_embeddings"`
	SlidingWindow         *int             `json:"sliding_window"`
	LayerTypes            []string         `json:"layer_types"`
	RopeTheta             *float64         `json:"rope_theta"`
	PartialRotaryFactor   *float64         `json:"partial_rotary_factor"`
	SlidingRopeTheta      *float64         `json:"sliding_rope_theta"`
	SlidingPartialFactor  *float64         `json:"sliding_partial_rotary_factor"`
	RopeParameters        map[string]*rope `json:"rope_parameters"`
	QuantizationConfig    *struct {
		QuantMethod string `json:"quant_method"`
	} `json:"quantization_config"`
	RopeScaling json.RawMessage `json:"rope_scaling"`
	TorchDtype  json.RawMessage `json:"torch_dtype"`
	Dtype       json.RawMessage `json:"dtype"`
	BosTokenID  json.RawMessage `json:"bos_token_id"`
	EosTokenID  json.RawMessage `json:"eos_token_id"`
	PadTokenID  json.RawMessage `json:"pad_token_id"`
}

type rope struct {
	Theta   *float64        `json:"rope_theta"`
	Partial *float64        `json:"partial_rotary_factor"`
	Type    json.RawMessage `json:"rope_type"`
}

// ParseConfig parses config.json text. Every problem found is reported at
// once, each naming its field.
func ParseConfig(data []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	var errs []error
	need := func(field string, v *int) int {
		if v == nil {
			errs = append(errs, fmt.Errorf("missing field %s", field))
			return 0
		}
		if hi := sizeLimits[field]; *v < 1 || *v > hi {
			errs = append(errs, fmt.Errorf("field %s = %d, must be in [1, %d]", field, *v, hi))
			return 0 // nothing is sized from a value out of range
		}
		return *v
	}
	c := &Config{}
	if r.ModelType != nil {
		c.ModelType = *r.ModelType
		if c.ModelType != "spark2_5" {
			errs = append(errs, fmt.Errorf("field model_type = %q, want \"spark2_5\"", c.ModelType))
		}
	}
	c.VocabSize = need("vocab_size", r.VocabSize)
	c.HiddenSize = need("hidden_size", r.HiddenSize)
	c.IntermediateSize = need("intermediate_size", r.IntermediateSize)
	c.NumLayers = need("num_hidden_layers", r.NumLayers)
	c.NumHeads = need("num_attention_heads", r.NumHeads)
	c.NumKVHeads = need("num_key_value_heads", r.NumKVHeads)
	if r.HeadDim != nil {
		c.HeadDim = need("head_dim", r.HeadDim)
	} else if c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if c.NumHeads > 0 && c.NumKVHeads > 0 && c.NumHeads%c.NumKVHeads != 0 {
		errs = append(errs, fmt.Errorf("field num_attention_heads = %d is not a multiple of num_key_value_heads = %d", c.NumHeads, c.NumKVHeads))
	}
	c.HiddenAct = "gelu"
	if r.HiddenAct != nil {
		c.HiddenAct = *r.HiddenAct
	}
	if c.HiddenAct != "gelu" && c.HiddenAct != "gelu_pytorch_tanh" {
		errs = append(errs, fmt.Errorf("field hidden_act = %q, want \"gelu\" (exact erf) or \"gelu_pytorch_tanh\"", c.HiddenAct))
	}
	if r.RMSNormEps == nil {
		errs = append(errs, errors.New("missing field rms_norm_eps"))
	} else if c.RMSNormEps = *r.RMSNormEps; !(c.RMSNormEps > 0) {
		errs = append(errs, fmt.Errorf("field rms_norm_eps = %g, must be > 0", c.RMSNormEps))
	}
	if r.MaxPositionEmbeddings != nil {
		c.MaxPositionEmbeddings = *r.MaxPositionEmbeddings
		if c.MaxPositionEmbeddings < 1 || c.MaxPositionEmbeddings > MaxPositions {
			errs = append(errs, fmt.Errorf("field max_position_embeddings = %d, must be in [1, %d]", c.MaxPositionEmbeddings, MaxPositions))
			c.MaxPositionEmbeddings = 0
		}
	}
	c.TieWordEmbeddings = true // transformers' default
	if r.TieWordEmbeddings != nil {
		c.TieWordEmbeddings = *r.TieWordEmbeddings
	}
	errs = append(errs, c.parseLayerTypes(r.LayerTypes)...)
	if r.SlidingWindow != nil {
		c.SlidingWindow = *r.SlidingWindow
	}
	if c.hasSliding() && c.SlidingWindow < 1 {
		if r.SlidingWindow == nil {
			errs = append(errs, errors.New("missing field sliding_window (the model has sliding_attention layers)"))
		} else {
			errs = append(errs, fmt.Errorf("field sliding_window = %d, must be >= 1", c.SlidingWindow))
		}
	}
	if c.SlidingWindow > MaxPositions {
		errs = append(errs, fmt.Errorf("field sliding_window = %d, must be <= %d", c.SlidingWindow, MaxPositions))
	}
	errs = append(errs, c.parseRoPE(&r)...)
	errs = append(errs, checkMath(&r, c.VocabSize)...)
	if q := r.QuantizationConfig; q != nil {
		c.QuantMethod = q.QuantMethod
		if c.QuantMethod == "" {
			c.QuantMethod = "unknown"
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// floatDtypes are the torch_dtype values of a float checkpoint.
var floatDtypes = []string{"bfloat16", "float16", "float32"}

// checkMath refuses the fields that would change the model's math in a
// way sparkconv does not implement, each naming the field and its value:
// any rope_scaling (the Spark-X2.5 family uses none; ignoring one would
// make every output silently wrong), a torch_dtype (or dtype) that is not
// a float type, and bos/eos/pad token ids outside [0, vocab_size).
func checkMath(r *rawConfig, vocab int) []error {
	var errs []error
	if present(r.RopeScaling) {
		errs = append(errs, fmt.Errorf("field rope_scaling = %s: RoPE scaling is not implemented (the Spark-X2.5 family uses none); refusing rather than ignoring it", compact(r.RopeScaling)))
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"torch_dtype", r.TorchDtype}, {"dtype", r.Dtype}} {
		if !present(f.raw) {
			continue
		}
		var s string
		if json.Unmarshal(f.raw, &s) != nil || !slices.Contains(floatDtypes, s) {
			errs = append(errs, fmt.Errorf("field %s = %s, want one of %s", f.name, compact(f.raw), strings.Join(floatDtypes, ", ")))
		}
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"bos_token_id", r.BosTokenID}, {"eos_token_id", r.EosTokenID}, {"pad_token_id", r.PadTokenID}} {
		if !present(f.raw) {
			continue
		}
		var one int64
		var list []int64
		ids := []int64{}
		if json.Unmarshal(f.raw, &one) == nil {
			ids = append(ids, one)
		} else if json.Unmarshal(f.raw, &list) == nil {
			ids = list
		} else {
			errs = append(errs, fmt.Errorf("field %s = %s, want a token id or a list of them", f.name, compact(f.raw)))
			continue
		}
		for _, id := range ids {
			if vocab > 0 && (id < 0 || id >= int64(vocab)) {
				errs = append(errs, fmt.Errorf("field %s = %s: token id %d is outside the vocabulary [0, %d)", f.name, compact(f.raw), id, vocab))
				break
			}
		}
	}
	return errs
}

// present reports whether a raw JSON field is given and not null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// compact is a raw JSON value on one line, cut to a readable length.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	if s := b.String(); len(s) > 120 {
		return s[:117] + "..."
	}
	return b.String()
}

func (c *Config) parseLayerTypes(types []string) []error {
	if types == nil {
		c.LayerTypesDerived = true
		c.LayerTypes = make([]LayerType, c.NumLayers)
		for i := range c.LayerTypes {
			c.LayerTypes[i] = Sliding
			if i%4 == 3 {
				c.LayerTypes[i] = Full
			}
		}
		return nil
	}
	var errs []error
	if c.NumLayers > 0 && len(types) != c.NumLayers { // 0: num_hidden_layers itself was refused
		errs = append(errs, fmt.Errorf("field layer_types has %d entries, num_hidden_layers is %d", len(types), c.NumLayers))
	}
	for i, t := range types {
		lt := LayerType(t)
		if lt != Sliding && lt != Full {
			errs = append(errs, fmt.Errorf("field layer_types[%d] = %q, want %q or %q", i, t, Sliding, Full))
		}
		c.LayerTypes = append(c.LayerTypes, lt)
	}
	return errs
}

func (c *Config) hasSliding() bool {
	for _, t := range c.LayerTypes {
		if t == Sliding {
			return true
		}
	}
	return false
}

func (c *Config) parseRoPE(r *rawConfig) []error {
	full := rope{Theta: r.RopeTheta, Partial: r.PartialRotaryFactor}
	sliding := rope{Theta: r.SlidingRopeTheta, Partial: r.SlidingPartialFactor}
	c.RoPESpelling = "flat"
	var errs []error
	if r.RopeParameters != nil {
		c.RoPESpelling = "rope_parameters"
		if r.RopeTheta != nil || r.SlidingRopeTheta != nil {
			errs = append(errs, errors.New("config gives both rope_parameters and flat rope_theta/sliding_rope_theta; use one spelling"))
		}
		full, sliding = rope{}, rope{}
		if p := r.RopeParameters[string(Full)]; p != nil {
			full = *p
		}
		if p := r.RopeParameters[string(Sliding)]; p != nil {
			sliding = *p
		}
		for _, lt := range []LayerType{Full, Sliding} {
			if p := r.RopeParameters[string(lt)]; p != nil && present(p.Type) && string(p.Type) != `"default"` {
				errs = append(errs, fmt.Errorf("field rope_parameters.%s.rope_type = %s: only \"default\" RoPE is implemented (the Spark-X2.5 family uses no scaling)", lt, compact(p.Type)))
			}
		}
	}
	fullField, slidingField := "rope_theta", "sliding_rope_theta"
	if r.RopeParameters != nil {
		fullField, slidingField = "rope_parameters.full_attention.rope_theta", "rope_parameters.sliding_attention.rope_theta"
	}
	var e []error
	c.FullRoPE, e = c.resolveRoPE(full, fullField, Full)
	errs = append(errs, e...)
	c.SlidingRoPE, e = c.resolveRoPE(sliding, slidingField, Sliding)
	return append(errs, e...)
}

func (c *Config) resolveRoPE(p rope, field string, t LayerType) (RoPE, []error) {
	out := RoPE{PartialRotaryFactor: 1}
	used := false
	for _, lt := range c.LayerTypes {
		used = used || lt == t
	}
	var errs []error
	if p.Theta == nil {
		if used {
			errs = append(errs, fmt.Errorf("missing field %s (the model has %s layers)", field, t))
		}
	} else if out.Theta = *p.Theta; !(out.Theta > 0) {
		errs = append(errs, fmt.Errorf("field %s = %g, must be > 0", field, out.Theta))
	}
	if p.Partial != nil {
		out.PartialRotaryFactor = *p.Partial
	}
	if f := out.PartialRotaryFactor; !(f > 0 && f <= 1) {
		errs = append(errs, fmt.Errorf("partial_rotary_factor for %s = %g, must be in (0, 1]", t, f))
	} else if r := float64(c.HeadDim) * f; c.HeadDim > 0 && (r != math.Trunc(r) || int(r)%2 != 0) {
		errs = append(errs, fmt.Errorf("partial_rotary_factor for %s = %g gives %g rotary dims of head_dim %d; must be an even integer", t, f, r, c.HeadDim))
	}
	return out, errs
}

// IsSliding reports whether layer i is a sliding-window layer.
func (c *Config) IsSliding(i int) bool { return c.LayerTypes[i] == Sliding }

// RoPEFor returns layer i's rotary parameters.
func (c *Config) RoPEFor(i int) RoPE {
	if c.IsSliding(i) {
		return c.SlidingRoPE
	}
	return c.FullRoPE
}

// RotaryDims is R for layer i: the leading head dims that rotate.
func (c *Config) RotaryDims(i int) int {
	return int(math.Round(float64(c.HeadDim) * c.RoPEFor(i).PartialRotaryFactor))
}

// QDim, KVDim are the widths of the query and of each of K and V.
func (c *Config) QDim() int  { return c.NumHeads * c.HeadDim }
func (c *Config) KVDim() int { return c.NumKVHeads * c.HeadDim }

// TanhGELU reports whether the MLP uses the tanh approximation.
func (c *Config) TanhGELU() bool { return c.HiddenAct == "gelu_pytorch_tanh" }

// CacheSlots is how many past entries layer i keeps at the given context:
// window-1 for sliding layers (capped by context-1), context-1 for full.
func (c *Config) CacheSlots(i, context int) int {
	if c.IsSliding(i) {
		return min(c.SlidingWindow-1, context-1)
	}
	return context - 1
}

// Summary is a short human description, e.g. for logs.
func (c *Config) Summary() string {
	var b strings.Builder
	for _, t := range c.LayerTypes {
		if t == Sliding {
			b.WriteByte('s')
		} else {
			b.WriteByte('f')
		}
	}
	return fmt.Sprintf("%d layers (%s), hidden %d, heads %d/%d x %d, vocab %d", c.NumLayers, b.String(), c.HiddenSize, c.NumHeads, c.NumKVHeads, c.HeadDim, c.VocabSize)
}
