package spark

import (
	"strings"
	"testing"
)

const goldenDir = "../../shared/golden/"

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

func TestPlanRealModel(t *testing.T) {
	c, err := ParseConfig([]byte(realConfig))
	if err != nil {
		t.Fatal(err)
	}
	p := c.NewPlan(2048)
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
