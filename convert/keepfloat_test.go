package convert

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// TestKeepFloatBuilds: a kept unit's weights are copied bit for bit, the
// config names it in the format's own terms (W8A8's ignore, GPTQ's negative
// dynamic rule) and records it, every other linear is quantized, and the
// reader takes the kept ones back as float.
func TestKeepFloatBuilds(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	keep := &KeepFloat{Units: []KeepUnit{{1, []string{spark.MLPDown}}, {0, []string{spark.MLPGate, spark.MLPUp}}}, Record: map[string]any{"count": 2}}
	kept := []string{"model.layers.1.mlp.down_proj", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"}
	for _, c := range []struct {
		name  string
		build func(out string) error
		qpart string // a quantized linear's part
	}{
		{"w8a8", func(out string) error {
			_, err := Convert(context.Background(), Options{Model: in, Out: out, Quiet: true}, W8A8{Keep: keep}, nil)
			return err
		}, "weight_scale"},
		{"gptq", func(out string) error {
			_, err := Convert(context.Background(), Options{Model: in, Out: out, Quiet: true}, W4A8{Group: 64, Keep: keep}, nil)
			return err
		}, "qweight"},
		{"w4a8-zp", func(out string) error {
			_, err := Convert(context.Background(), Options{Model: in, Out: out, Quiet: true}, W4A8ZP{Group: 64, Keep: keep}, nil)
			return err
		}, "weight_packed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), c.name)
			if err := c.build(out); err != nil {
				t.Fatal(err)
			}
			cfg := readConfig(t, out)
			rec, _ := cfg[KeepFloatKey].(map[string]any)
			if got, _ := rec["modules"].([]any); len(got) != 3 || rec["count"] != 2.0 {
				t.Errorf("%s = %v, want the 3 kept modules and the record", KeepFloatKey, cfg[KeepFloatKey])
			}
			qc := cfg["quantization_config"].(map[string]any)
			if c.name != "gptq" { // compressed-tensors: the ignore list
				ign := qc["ignore"].([]any)
				if len(ign) != 5 || ign[0] != "lm_head" || ign[1] != "re:.*g_proj$" || ign[2] != kept[0] || ign[3] != kept[1] || ign[4] != kept[2] {
					t.Errorf("ignore = %v", ign)
				}
			} else {
				dyn := qc["dynamic"].(map[string]any)
				if len(dyn) != 3 {
					t.Errorf("dynamic = %v, want g_proj's rule and one per kept unit", dyn)
				}
				if m := qc["meta"].(map[string]any)["keep_float"].([]any); len(m) != 3 {
					t.Errorf("meta.keep_float = %v", m)
				}
			}
			src, _ := safetensors.OpenDir(in)
			defer src.Close()
			dst, err := safetensors.OpenDir(out)
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			cfgIn, _ := spark.LoadConfig(in)
			for _, s := range cfgIn.Tensors() {
				if s.Kind != spark.KindLinear {
					continue
				}
				mod := s.Module()
				_, hasPart := dst.Info(mod + "." + c.qpart)
				if slices.Contains(kept, mod) {
					_, a, _ := src.Raw(s.Name)
					info, b, err := dst.Raw(s.Name)
					if err != nil || !bytes.Equal(a, b) || !info.DType.IsFloat() || hasPart {
						t.Errorf("%s: kept module not copied bit for bit (%v)", mod, err)
					}
				} else if !hasPart {
					t.Errorf("%s: not quantized", mod)
				}
			}
			w, err := OpenWeights(out)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for _, name := range []string{"model.layers.1.mlp.down_proj.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"} {
				_, _, ok, err := w.Float(name)
				if want := !strings.HasPrefix(name, "model.layers.1.mlp.up"); err != nil || ok != want {
					t.Errorf("reader: %s float %v (%v), want %v", name, ok, err, want)
				}
			}
		})
	}
}

// TestKeepFloatRefuses: a unit that is not one of the model's is refused
// before anything is written.
func TestKeepFloatRefuses(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	for _, u := range []KeepUnit{{99, []string{spark.MLPDown}}, {0, []string{spark.MLPGate}}, {0, []string{spark.GateProj}}} {
		out := filepath.Join(t.TempDir(), "o")
		keep := &KeepFloat{Units: []KeepUnit{u}}
		_, err := Convert(context.Background(), Options{Model: in, Out: out, Quiet: true}, W8A8{Keep: keep}, nil)
		if err == nil || !strings.Contains(err.Error(), u.String()) {
			t.Errorf("%s: %v, want it refused by name", u, err)
		}
		if _, err := Convert(context.Background(), Options{Model: in, Out: out, Quiet: true}, W4A8{Group: 64, Keep: keep}, nil); err == nil {
			t.Errorf("gptq %s: accepted", u)
		}
	}
}

// TestKeepFloatDynamicRules: each unit's rule, as GPTQModel and vLLM match
// it (from the start of the module name), excludes the unit's modules (and
// the fused gate_up_proj of a gate/up pair) and nothing else.
func TestKeepFloatDynamicRules(t *testing.T) {
	k := &KeepFloat{Units: []KeepUnit{{1, []string{spark.MLPDown}}, {2, []string{spark.MLPGate, spark.MLPUp}}, {3, []string{spark.QKV}}}}
	dyn := map[string]any{}
	k.gptqDynamic(dyn)
	var e excluded
	for key := range dyn {
		p, _ := strings.CutPrefix(key, "-:")
		if err := e.add(p, true); err != nil {
			t.Fatal(err)
		}
		if _, err := regexp.Compile(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		module string
		want   bool
	}{
		{"model.layers.1.mlp.down_proj", true}, {"model.layers.11.mlp.down_proj", false}, {"model.layers.1.mlp.down_proj_x", false},
		{"model.layers.2.mlp.gate_proj", true}, {"model.layers.2.mlp.up_proj", true}, {"model.layers.2.mlp.gate_up_proj", true},
		{"model.layers.2.mlp.down_proj", false}, {"model.layers.3.self_attn.q_k_v_proj", true}, {"model.layers.3.self_attn.o_proj", false},
		{"xmodel.layers.1.mlp.down_proj", false},
	} {
		if got := e.match(c.module); got != c.want {
			t.Errorf("%s: excluded %v, want %v (rules %v)", c.module, got, c.want, dyn)
		}
	}
}
