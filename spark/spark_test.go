package spark

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/dtype"
	"sparkconv/safetensors"
)

const goldenDir = "../testdata/golden/"

func TestOpenGolden(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		tied     bool
		layers   string
		spelling string
	}{
		{"spark-mini-tied", true, "sssfsssf", "flat"},
		{"spark-mini-untied", false, "sssf", "rope_parameters"},
	} {
		m, err := Open(goldenDir + tc.dir)
		if err != nil {
			t.Fatalf("%s: %v", tc.dir, err)
		}
		c := m.Config
		if c.TieWordEmbeddings != tc.tied || c.RoPESpelling != tc.spelling || !strings.Contains(c.Summary(), "("+tc.layers+")") {
			t.Errorf("%s: tied=%v spelling=%s summary=%s", tc.dir, c.TieWordEmbeddings, c.RoPESpelling, c.Summary())
		}
		if c.RotaryDims(0) != 32 || c.RotaryDims(3) != 8 || c.RoPEFor(0).Theta != 1e4 || c.RoPEFor(3).Theta != 5e6 {
			t.Errorf("%s: rope sliding R=%d theta=%g, full R=%d theta=%g", tc.dir, c.RotaryDims(0), c.RoPEFor(0).Theta, c.RotaryDims(3), c.RoPEFor(3).Theta)
		}
		if c.CacheSlots(0, 1024) != 7 || c.CacheSlots(3, 1024) != 1023 {
			t.Errorf("%s: cache slots %d/%d", tc.dir, c.CacheSlots(0, 1024), c.CacheSlots(3, 1024))
		}
		if err := m.CheckFinite(); err != nil {
			t.Error(err)
		}
		m.Close()
	}
}

func TestConfigErrors(t *testing.T) {
	base := `"vocab_size":512,"hidden_size":128,"intermediate_size":192,"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":32,"rms_norm_eps":1e-6,"rope_theta":5e6,"partial_rotary_factor":0.25,"sliding_rope_theta":1e4`
	tests := []struct {
		name, extra, want string
	}{
		{"ok derived layer types", `,"sliding_window":8`, ""},
		{"window zero", `,"sliding_window":0`, "field sliding_window = 0"},
		{"window missing", ``, "missing field sliding_window"},
		{"bad act", `,"sliding_window":8,"hidden_act":"silu"`, "field hidden_act"},
		{"bad layer type", `,"sliding_window":8,"layer_types":["sliding_attention","sliding_attention","sliding_attention","chunked"]`, "layer_types[3]"},
		{"layer count", `,"sliding_window":8,"layer_types":["full_attention"]`, "layer_types has 1 entries"},
		{"gqa", `,"sliding_window":8,"num_key_value_heads":3`, "num_key_value_heads"},
		{"model type", `,"sliding_window":8,"model_type":"llama"`, "model_type"},
		{"odd rotary", `,"sliding_window":8,"sliding_partial_rotary_factor":0.3`, "even integer"},
		// fields that change the math, refused naming field and value
		{"rope_scaling yarn", `,"sliding_window":8,"rope_scaling":{"rope_type":"yarn","factor":4.0}`, `field rope_scaling = {"rope_type":"yarn","factor":4.0}: RoPE scaling is not implemented`},
		{"rope_scaling any word", `,"sliding_window":8,"rope_scaling":{"type":"word"}`, `field rope_scaling = {"type":"word"}`},
		{"rope_scaling default", `,"sliding_window":8,"rope_scaling":{"rope_type":"default"}`, `field rope_scaling = {"rope_type":"default"}`},
		{"rope_scaling null", `,"sliding_window":8,"rope_scaling":null`, ""},
		{"nested rope_type", `,"sliding_window":8,"rope_theta":null,"sliding_rope_theta":null,"rope_parameters":{"full_attention":{"rope_theta":5e6,"partial_rotary_factor":0.25,"rope_type":"linear"},"sliding_attention":{"rope_theta":1e4,"rope_type":"default"}}`, `field rope_parameters.full_attention.rope_type = "linear"`},
		{"nested rope_type default", `,"sliding_window":8,"rope_theta":null,"sliding_rope_theta":null,"rope_parameters":{"full_attention":{"rope_theta":5e6,"partial_rotary_factor":0.25,"rope_type":"default"},"sliding_attention":{"rope_theta":1e4}}`, ""},
		{"unknown act", `,"sliding_window":8,"hidden_act":"gelu_new"`, `field hidden_act = "gelu_new"`},
		{"torch_dtype float8", `,"sliding_window":8,"torch_dtype":"float8"`, `field torch_dtype = "float8", want one of bfloat16, float16, float32`},
		{"torch_dtype int8", `,"sliding_window":8,"torch_dtype":"int8"`, `field torch_dtype = "int8"`},
		{"dtype number", `,"sliding_window":8,"dtype":16`, `field dtype = 16`},
		{"torch_dtype float32", `,"sliding_window":8,"torch_dtype":"float32","dtype":"bfloat16"`, ""},
		{"bos outside vocab", `,"sliding_window":8,"bos_token_id":99999`, "field bos_token_id = 99999: token id 99999 is outside the vocabulary [0, 512)"},
		{"eos negative", `,"sliding_window":8,"eos_token_id":-1`, "field eos_token_id = -1: token id -1 is outside the vocabulary [0, 512)"},
		{"eos list", `,"sliding_window":8,"eos_token_id":[1,512]`, "field eos_token_id = [1,512]: token id 512 is outside"},
		{"pad word", `,"sliding_window":8,"pad_token_id":"x"`, `field pad_token_id = "x", want a token id`},
		{"ids in vocab", `,"sliding_window":8,"bos_token_id":0,"eos_token_id":[1,511],"pad_token_id":null`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js := "{" + base + tc.extra + "}"
			// a later key overrides an earlier one in encoding/json
			c, err := ParseConfig([]byte(js))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !c.LayerTypesDerived || c.LayerTypes[3] != Full || c.LayerTypes[2] != Sliding {
					t.Errorf("derived layer types %v", c.LayerTypes)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestBothSpellingsAgree(t *testing.T) {
	common := `"vocab_size":512,"hidden_size":128,"intermediate_size":192,"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":32,"rms_norm_eps":1e-6,"sliding_window":8`
	flat, err := ParseConfig([]byte(`{` + common + `,"rope_theta":5e6,"partial_rotary_factor":0.25,"sliding_rope_theta":1e4}`))
	if err != nil {
		t.Fatal(err)
	}
	nested, err := ParseConfig([]byte(`{` + common + `,"rope_parameters":{"full_attention":{"rope_theta":5e6,"partial_rotary_factor":0.25},"sliding_attention":{"rope_theta":1e4}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if flat.FullRoPE != nested.FullRoPE || flat.SlidingRoPE != nested.SlidingRoPE {
		t.Errorf("flat %+v/%+v vs nested %+v/%+v", flat.FullRoPE, flat.SlidingRoPE, nested.FullRoPE, nested.SlidingRoPE)
	}
}

// realConfig is the real Spark-X2.5-1.7B config.json (the spec's table).
const realConfig = `{"model_type":"spark2_5","vocab_size":131072,"hidden_size":2048,"intermediate_size":6656,
"num_hidden_layers":28,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":256,"hidden_act":"gelu",
"rms_norm_eps":1e-6,"max_position_embeddings":1048576,"tie_word_embeddings":true,"sliding_window":512,
"rope_theta":5000000.0,"partial_rotary_factor":0.25,"sliding_rope_theta":10000.0}`

func TestFootprintRealModel(t *testing.T) {
	c, err := ParseConfig([]byte(realConfig))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Footprint(2048)
	if err != nil {
		t.Fatal(err)
	}
	// The spec: RoPE tables 640 MB by max_position_embeddings vs 1.25 MB by max_model_len.
	if p.RoPETables.BytesByMaxPosition != 640<<20 || p.RoPETables.BytesByModelLen != 1280<<10 {
		t.Errorf("rope tables %d / %d bytes, want 640 MiB / 1.25 MiB", p.RoPETables.BytesByMaxPosition, p.RoPETables.BytesByModelLen)
	}
	if p.LayerTypeMap != "sssfsssfsssfsssfsssfsssfsssf" || len(p.Layers["full_attention"]) != 7 || p.Layers["full_attention"][6] != 27 {
		t.Errorf("layer map %s %v", p.LayerTypeMap, p.Layers)
	}
	// 2 (K,V) x 2 heads x 256 x 2 bytes x 28 layers.
	if p.KVCache.BytesPerTokenFlat != 57344 {
		t.Errorf("kv bytes/token %d", p.KVCache.BytesPerTokenFlat)
	}
	// hybrid at 2048: 21 sliding layers x 511 + 7 full x 2048 tokens, 2048 B each.
	if want := int64(2048 * (21*511 + 7*2048)); p.KVCache.HybridBytes != want {
		t.Errorf("hybrid kv %d, want %d", p.KVCache.HybridBytes, want)
	}
	// 1.7 B parameters: 131072*2048 + 28*(3072*2048+2048*2048+3*6656*2048+8*2048+2*2048) + 2048.
	if want := int64(131072*2048 + 28*(3072*2048+2048*2048+3*6656*2048+8*2048+2*2048) + 2048); p.Params.Total != want {
		t.Errorf("params %d, want %d", p.Params.Total, want)
	}
	if p.Formats[0].Bytes != 2*p.Params.Total {
		t.Errorf("bf16 bytes %d", p.Formats[0].Bytes)
	}
}

func TestCheckTensorsListsEverything(t *testing.T) {
	dir := t.TempDir()
	cfgText, err := os.ReadFile(goldenDir + "spark-mini-untied/config.json")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ConfigFile), cfgText, 0o644)
	c, err := ParseConfig(cfgText)
	if err != nil {
		t.Fatal(err)
	}
	var tensors []safetensors.Tensor
	for _, s := range c.Tensors() {
		shape, dt := s.Shape, dtype.BF16
		switch s.Name {
		case LayerWeight(1, OProj), LayerWeight(3, MLPUp):
			continue // missing
		case LayerWeight(2, QKV):
			shape = []int64{shape[0] - 64, shape[1]} // as if head_dim were wrong
		case LayerWeight(0, MLPDown):
			shape = []int64{shape[1], shape[0]} // transposed
		case LayerWeight(1, MLPGate):
			dt = dtype.I16
		}
		n := int64(2)
		for _, d := range shape {
			n *= d
		}
		tensors = append(tensors, safetensors.Tensor{Name: s.Name, DType: dt, Shape: shape,
			Produce: func() ([]byte, error) { return make([]byte, n), nil }})
	}
	tensors = append(tensors, safetensors.Tensor{Name: "model.layers.0.self_attn.q_proj.weight", DType: dtype.BF16, Shape: []int64{1},
		Produce: func() ([]byte, error) { return make([]byte, 2), nil }})
	if _, err := safetensors.WriteCheckpoint(dir, tensors, safetensors.WriteOptions{Shards: 2}); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir)
	if err == nil {
		t.Fatal("mismatched checkpoint accepted")
	}
	for _, want := range []string{
		"6 problems",
		"missing tensor model.layers.1.self_attn.o_proj.weight, expected shape [128 256]",
		"missing tensor model.layers.3.mlp.up_proj.weight, expected shape [192 128]",
		"tensor model.layers.0.mlp.down_proj.weight has shape [192 128], expected [128 192]",
		"tensor model.layers.1.mlp.gate_proj.weight has dtype I16, expected BF16, F16 or F32",
		"tensor model.layers.2.self_attn.q_k_v_proj.weight has shape [320 128], expected [384 128] (rows = num_attention_heads*head_dim + 2*num_key_value_heads*head_dim = 8*32 + 2*2*32)",
		"unexpected tensor model.layers.0.self_attn.q_proj.weight",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestConfigSizesBounded: sizes no real model has are refused by field
// before anything is allocated from them (num_hidden_layers 1e9 once cost
// a 16 GB slice), and a config asking for more layers than the checkpoint
// holds is refused by Open before the tensors are listed.
func TestConfigSizesBounded(t *testing.T) {
	base := `"vocab_size":512,"hidden_size":128,"intermediate_size":192,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":32,"rms_norm_eps":1e-6,"rope_theta":5e6,"partial_rotary_factor":0.25,"sliding_rope_theta":1e4,"sliding_window":8`
	_, err := ParseConfig([]byte("{" + base + `,"num_hidden_layers":1000000000,"layer_types":["full_attention"]}`))
	if err == nil || strings.Contains(err.Error(), "num_hidden_layers is 0") {
		t.Errorf("a refused num_hidden_layers compared with layer_types: %v", err)
	}
	for _, c := range []struct{ extra, want string }{
		{`,"num_hidden_layers":1000000000`, "field num_hidden_layers = 1000000000, must be in [1, 4096]"},
		{`,"num_hidden_layers":4,"vocab_size":1e12`, "vocab_size"},
		{`,"num_hidden_layers":4,"vocab_size":99999999999`, "field vocab_size = 99999999999"},
		{`,"num_hidden_layers":4,"max_position_embeddings":4611686018427387904`, "max_position_embeddings"},
		{`,"num_hidden_layers":4,"sliding_window":4611686018427387904`, "sliding_window"},
		{`,"num_hidden_layers":4,"head_dim":1048576`, "head_dim"},
	} {
		_, err := ParseConfig([]byte("{" + base + c.extra + "}"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.extra, err, c.want)
		}
	}
	dir := t.TempDir()
	for _, f := range []string{"model.safetensors", "tokenizer.json"} {
		b, _ := os.ReadFile(goldenDir + "spark-mini-untied/" + f)
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	cfg, _ := os.ReadFile(goldenDir + "spark-mini-untied/config.json")
	cfg = []byte(strings.Replace(string(cfg), `"num_hidden_layers": 4`, `"num_hidden_layers": 4000`, 1))
	if !strings.Contains(string(cfg), "4000") {
		t.Fatal("test config edit failed")
	}
	cfg = []byte(strings.Replace(string(cfg), `"layer_types"`, `"unused_layer_types"`, 1))
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "num_hidden_layers = 4000 needs at least 32002 tensors") ||
		!strings.Contains(err.Error(), "(31968 problems)") || !strings.Contains(err.Error(), "... and 31904 more") {
		t.Errorf("layers beyond the checkpoint: %v", err)
	}
}

// TestFootprintOverflow: byte counts that do not fit in 64 bits are refused,
// never printed wrapped around.
func TestFootprintOverflow(t *testing.T) {
	c, err := ParseConfig([]byte(realConfig))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Footprint(MaxPositions); err != nil {
		t.Errorf("2^30 tokens on the real model: %v", err)
	}
	c.NumKVHeads, c.HeadDim, c.NumLayers = 1<<12, 1<<14, 1<<12
	c.LayerTypes = make([]LayerType, c.NumLayers)
	for i := range c.LayerTypes {
		c.LayerTypes[i] = Full
	}
	if _, err := c.Footprint(MaxPositions); err == nil || !strings.Contains(err.Error(), "64 bits") {
		t.Errorf("overflowing plan: %v", err)
	}
}

// TestNaNRefusedOnRead: a NaN weight is refused by Raw and Float32, naming
// the tensor and the file, as every command reads weights through them.
func TestNaNRefusedOnRead(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, _ := os.ReadFile(goldenDir + "spark-mini-untied/" + f)
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	name := LayerWeight(1, MLPUp)
	info, _ := m.Info(name)
	m.Close()
	// Poke a bf16 NaN (0x7fc0) into the middle of the tensor on disk.
	f, _ := os.OpenFile(filepath.Join(dir, "model.safetensors"), os.O_RDWR, 0)
	var hdr [8]byte
	f.ReadAt(hdr[:], 0)
	start := 8 + int64(binary.LittleEndian.Uint64(hdr[:]))
	f.WriteAt([]byte{0xc0, 0x7f}, start+info.Begin+10*2)
	f.Close()
	m, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, read := range []func() error{
		func() error { _, _, err := m.Raw(name); return err },
		func() error { _, _, err := m.Float32(name); return err },
		m.CheckFinite,
	} {
		if err := read(); err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "NaN at flat index 10") {
			t.Errorf("read of a NaN tensor: %v", err)
		}
	}
	if _, _, err := m.Raw(LayerWeight(0, MLPUp)); err != nil {
		t.Errorf("a finite tensor: %v", err)
	}
}
