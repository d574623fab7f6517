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
