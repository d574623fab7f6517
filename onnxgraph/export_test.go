package onnxgraph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	. "sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"
	"sparkconv/ortrun/orttest"
	"sparkconv/spark"

	"google.golang.org/protobuf/proto"
)

const tiedDir = goldenDir + "/spark-mini-tied"

func readModel(t *testing.T, path string) *onnxpb.ModelProto {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(raw, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestExportDeterministic(t *testing.T) {
	for _, o := range []ExportOptions{{Context: 32}, {Context: 32, DType: Float16, Granularity: "block", Layout: LayoutRoll}} {
		a, b := export(t, tiedDir, o), export(t, tiedDir, o)
		entries, _ := os.ReadDir(a)
		if len(entries) != 11 && len(entries) != 5 { // embed + 8 layers + head + manifest, or 2 blocks
			t.Fatalf("%d files in export", len(entries))
		}
		for _, e := range entries {
			x, _ := os.ReadFile(filepath.Join(a, e.Name()))
			y, err := os.ReadFile(filepath.Join(b, e.Name()))
			if err != nil || !bytes.Equal(x, y) {
				t.Errorf("%s differs between two runs (%v)", e.Name(), err)
			}
		}
	}
}

func tensor(name string, dt string, shape ...int64) TensorSpec {
	return TensorSpec{Name: name, Shape: shape, DType: dt}
}

// TestManifestContract pins the manifest against docs/formats.md#onnx-decode-step for
// the mini model (H 128, V 512, KV 2, D 32, window 8, sssf sssf).
func TestManifestContract(t *testing.T) {
	dir := export(t, tiedDir, ExportOptions{Context: 32})
	man, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if man.Opset != 17 || man.Context != 32 || man.DType != "float32" || man.MaskValue != -10000 || man.GELU != "erf" || man.Layout != "auto" || man.Granularity != "layer" || man.Partial {
		t.Fatalf("top level: %+v", man)
	}
	if len(man.Graphs) != 10 {
		t.Fatalf("%d graphs", len(man.Graphs))
	}
	f32 := "float32"
	want := map[string]GraphEntry{
		"embed.onnx": {Kind: KindEmbed, Inputs: []TensorSpec{tensor("input_ids", "int64", 1, 1)}, Outputs: []TensorSpec{tensor("hidden_out", f32, 1, 1, 128)}},
		"layer_00.onnx": {Kind: KindLayer,
			LayerInfo: &LayerInfo{Layer: 0, LayerType: "sliding_attention", Layout: "ring", CacheSlots: 7, RotaryDims: 32, RopeTheta: 10000},
			Inputs: []TensorSpec{tensor("hidden_in", f32, 1, 1, 128), tensor("rope_cos", f32, 1, 1, 16), tensor("rope_sin", f32, 1, 1, 16),
				tensor("past_key", f32, 1, 2, 32, 7), tensor("past_value", f32, 1, 2, 7, 32), tensor("attention_mask", f32, 1, 1, 1, 8)},
			Outputs: []TensorSpec{tensor("hidden_out", f32, 1, 1, 128), tensor("new_key", f32, 1, 2, 32, 1), tensor("new_value", f32, 1, 2, 1, 32)}},
		"layer_03.onnx": {Kind: KindLayer,
			LayerInfo: &LayerInfo{Layer: 3, LayerType: "full_attention", Layout: "roll", CacheSlots: 31, RotaryDims: 8, RopeTheta: 5e6},
			Inputs: []TensorSpec{tensor("hidden_in", f32, 1, 1, 128), tensor("rope_cos", f32, 1, 1, 4), tensor("rope_sin", f32, 1, 1, 4),
				tensor("past_key", f32, 1, 2, 32, 31), tensor("past_value", f32, 1, 2, 31, 32), tensor("attention_mask", f32, 1, 1, 1, 32)},
			Outputs: []TensorSpec{tensor("hidden_out", f32, 1, 1, 128), tensor("present_key", f32, 1, 2, 32, 31), tensor("present_value", f32, 1, 2, 31, 32)}},
		"head.onnx": {Kind: KindHead, Inputs: []TensorSpec{tensor("hidden_in", f32, 1, 1, 128)}, Outputs: []TensorSpec{tensor("logits", f32, 1, 1, 512)}},
	}
	for _, g := range man.Graphs {
		h, err := onnxio.HashFile(filepath.Join(dir, g.File))
		if err != nil || h.SHA256 != g.SHA256 || g.Opset != 17 {
			t.Errorf("%s: sha256 %s vs %s, opset %d", g.File, h.SHA256, g.SHA256, g.Opset)
		}
		w, ok := want[g.File]
		if !ok {
			continue
		}
		if g.Kind != w.Kind || !reflect.DeepEqual(g.LayerInfo, w.LayerInfo) || !reflect.DeepEqual(g.Inputs, w.Inputs) || !reflect.DeepEqual(g.Outputs, w.Outputs) {
			t.Errorf("%s:\n got %+v %+v\n     %v\n     %v\nwant %+v %+v\n     %v\n     %v", g.File, g.Kind, g.LayerInfo, g.Inputs, g.Outputs, w.Kind, w.LayerInfo, w.Inputs, w.Outputs)
		}
		if g.Kind == KindHead && (g.Tied == nil || !*g.Tied) {
			t.Errorf("head not marked tied")
		}
	}
	// Every config key copied equals config.json.
	raw, _ := os.ReadFile(filepath.Join(tiedDir, "config.json"))
	var cfg map[string]json.RawMessage
	json.Unmarshal(raw, &cfg)
	for k, v := range man.Config {
		var a, b any
		json.Unmarshal(v, &a)
		json.Unmarshal(cfg[k], &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("config key %s = %s, config.json has %s", k, v, cfg[k])
		}
	}
	if len(man.Config) < 15 {
		t.Errorf("only %d config keys", len(man.Config))
	}
}

// nodeChain follows single-reader links from a node and returns op types.
func opTypes(g *onnxpb.GraphProto) []string {
	var ops []string
	for _, n := range g.Node {
		ops = append(ops, n.GetOpType())
	}
	return ops
}

// TestGraphPatterns checks the QNN-facing rules of the contract on the
// written bytes: IR 8 / opset 17, the exact GELU and RMSNorm sequences,
// one last-axis Softmax per layer, Concat(past, new) on the slot axis,
// 1-D axes, no allowzero, no bool tensors, static shapes.
func TestGraphPatterns(t *testing.T) {
	for _, o := range []ExportOptions{{Context: 32}, {Context: 32, Granularity: "block"}, {Context: 32, Prefill: 8}, {Context: 32, Prefill: 8, Granularity: "block"}} {
		dir := export(t, tiedDir, o)
		man, _ := ReadManifest(dir)
		for _, ge := range man.AllGraphs() {
			m := readModel(t, filepath.Join(dir, ge.File))
			if m.GetIrVersion() != 8 || len(m.OpsetImport) != 1 || m.OpsetImport[0].GetVersion() != 17 {
				t.Fatalf("%s: ir %d opset %v", ge.File, m.GetIrVersion(), m.OpsetImport)
			}
			g := m.Graph
			inits := map[string]*onnxpb.TensorProto{}
			for _, in := range g.Initializer {
				inits[in.GetName()] = in
				if in.GetDataType() == int32(onnxpb.TensorProto_BOOL) {
					t.Errorf("%s: bool initializer %s", ge.File, in.GetName())
				}
			}
			for _, vi := range append(append([]*onnxpb.ValueInfoProto{}, g.Input...), g.Output...) {
				tt := vi.GetType().GetTensorType()
				if tt.GetElemType() == int32(onnxpb.TensorProto_BOOL) || tt.GetShape() == nil {
					t.Errorf("%s: %s is bool or has no shape", ge.File, vi.GetName())
				}
				for _, d := range tt.GetShape().GetDim() {
					if d.GetDimValue() < 1 {
						t.Errorf("%s: %s not static", ge.File, vi.GetName())
					}
				}
			}
			ops := strings.Join(opTypes(g), " ")
			nLayers := len(ge.LayerInfos())
			counts := map[string]int{}
			for _, n := range g.Node {
				counts[n.GetOpType()]++
				for _, a := range n.Attribute {
					if a.GetName() == "allowzero" && a.GetI() != 0 {
						t.Errorf("%s: Reshape allowzero=1", ge.File)
					}
				}
				switch n.GetOpType() {
				case "IsNaN", "Where", "Expand", "Tile", "ReduceSum", "Exp", "Cast":
					t.Errorf("%s: forbidden op %s", ge.File, n.GetOpType())
				case "Softmax":
					if len(n.Attribute) != 1 || n.Attribute[0].GetI() != -1 {
						t.Errorf("%s: softmax attrs %v", ge.File, n.Attribute)
					}
				case "Slice", "Split":
					for _, in := range n.Input[1:] {
						if c := inits[in]; c == nil || len(c.Dims) != 1 {
							t.Errorf("%s: %s input %s is not a 1-D initializer", ge.File, n.GetOpType(), in)
						}
					}
				case "ReduceMean":
					if n.Attribute[0].GetName() != "axes" || !reflect.DeepEqual(n.Attribute[0].GetInts(), []int64{-1}) {
						t.Errorf("%s: ReduceMean attrs %v", ge.File, n.Attribute)
					}
				case "Concat":
					if strings.HasPrefix(n.Input[0], "past_key") && n.Attribute[0].GetI() != 3 {
						t.Errorf("%s: key concat axis %d", ge.File, n.Attribute[0].GetI())
					}
				}
			}
			if ge.Kind == KindLayer || ge.Kind == KindBlock {
				if counts["Softmax"] != nLayers || counts["Erf"] != nLayers || counts["Sigmoid"] != nLayers {
					t.Errorf("%s: %d softmax, %d erf, %d sigmoid for %d layers", ge.File, counts["Softmax"], counts["Erf"], counts["Sigmoid"], nLayers)
				}
				gelu := "Div Erf Add Mul Mul"
				rms := "Pow ReduceMean Add Sqrt Div Mul"
				if strings.Count(ops, gelu) != nLayers || strings.Count(ops, rms) != 2*nLayers {
					t.Errorf("%s: GELU pattern x%d, RMSNorm pattern x%d\n%s", ge.File, strings.Count(ops, gelu), strings.Count(ops, rms), ops)
				}
			}
		}
	}
}

func TestParseLayers(t *testing.T) {
	cases := []struct {
		in   string
		want []int
		err  bool
	}{
		{"all", nil, false},
		{"", nil, false},
		{"3", []int{3}, false},
		{"0-3", []int{0, 1, 2, 3}, false},
		{"0-1,6-7", []int{0, 1, 6, 7}, false},
		{"7-8", nil, true},
		{"3-1", nil, true},
		{"1,1", nil, true},
		{"x", nil, true},
		{"-1", nil, true},
	}
	for _, c := range cases {
		got, err := ParseLayers(c.in, 8)
		if (err != nil) != c.err || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseLayers(%q) = %v, %v", c.in, got, err)
		}
	}
}

// TestShardedExport: disjoint --layers ranges write every graph once, embed
// with layer 0 and head with the last layer, and the shards together are
// byte-identical to the full export.
func TestShardedExport(t *testing.T) {
	full := export(t, tiedDir, ExportOptions{Context: 32})
	a := export(t, tiedDir, ExportOptions{Context: 32, Layers: []int{0, 1, 2}})
	b := export(t, tiedDir, ExportOptions{Context: 32, Layers: []int{3, 4, 5, 6, 7}})
	seen := map[string]int{}
	for _, d := range []string{a, b} {
		man, err := ReadManifest(d)
		if err != nil || !man.Partial {
			t.Fatalf("partial manifest: %v %v", err, man)
		}
		for _, g := range man.Graphs {
			seen[g.File]++
			x, _ := os.ReadFile(filepath.Join(full, g.File))
			y, _ := os.ReadFile(filepath.Join(d, g.File))
			if !bytes.Equal(x, y) {
				t.Errorf("%s differs from the full export", g.File)
			}
		}
	}
	if len(seen) != 10 || seen["embed.onnx"] != 1 || seen["head.onnx"] != 1 {
		t.Fatalf("files across shards: %v", seen)
	}
	m, _ := spark.Open(tiedDir)
	defer m.Close()
	if _, err := Export(context.Background(), m, t.TempDir(), ExportOptions{Granularity: "block", Layers: []int{0, 1}}); err == nil || !strings.Contains(err.Error(), "whole blocks") {
		t.Fatalf("partial block: %v", err)
	}
}

// TestExportExternalData lowers the 2 GiB threshold so every graph keeps its
// weights in "<file>.data", then checks the export still reproduces the
// golden values in ONNX Runtime.
func TestExportExternalData(t *testing.T) {
	orttest.Init(t)
	g := loadGolden(t, "spark-mini-tied")
	dir := export(t, g.dir, ExportOptions{Context: 48, Write: onnxio.WriteOptions{ExternalThreshold: 64 << 10}})
	man, _ := ReadManifest(dir)
	for _, ge := range man.Graphs {
		if ge.ExternalData == nil || ge.ExternalData.Name != ge.File+".data" {
			t.Fatalf("%s: no external data (%d bytes)", ge.File, ge.Bytes)
		}
		if ge.Bytes > 64<<10 {
			t.Errorf("%s still %d bytes", ge.File, ge.Bytes)
		}
	}
	res := runGolden(t, g, dir, "")
	if snr, at := res.minSNR(); snr < 100 {
		t.Fatalf("external-data export: %.1f dB at %s", snr, at)
	}
}

func FuzzParseManifest(f *testing.F) {
	dir := f.TempDir()
	m, err := spark.Open(tiedDir)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := Export(context.Background(), m, dir, ExportOptions{Context: 16, Granularity: "block"}); err != nil {
		f.Fatal(err)
	}
	pdir := f.TempDir()
	if _, err := Export(context.Background(), m, pdir, ExportOptions{Context: 16, Prefill: 4, Layers: []int{0, 1}}); err != nil {
		f.Fatal(err)
	}
	m.Close()
	good, _ := os.ReadFile(filepath.Join(dir, ManifestFile))
	f.Add(good)
	withPrefill, _ := os.ReadFile(filepath.Join(pdir, ManifestFile))
	f.Add(withPrefill)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"opset":17,"context":4,"dtype":"float16","mask_value":-1,"graphs":[{"file":"a.onnx","kind":"layer","sha256":"` + strings.Repeat("a", 64) + `","inputs":[],"outputs":[]}]}`))
	f.Add(bytes.Replace(good, []byte(`"ring"`), []byte(`"rung"`), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		man, err := ParseManifest(data)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to bytes that parse and re-encode
		// to the same bytes.
		out, err := man.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseManifest(out)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		out2, _ := again.Marshal()
		if !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the manifest:\n%s\n%s", out, out2)
		}
	})
}

// TestValueNames: every value the manifest maps to a forward point is
// produced by a node of its graph, each layer carries the whole attention
// and MLP chain under layers.N/, and the names do not depend on the
// export's other options (a block graph names layer 1's points as the
// layer graph does).
func TestValueNames(t *testing.T) {
	points := []string{"attn_norm", "q", "k", "v", "q_rope", "k_rope", "scores", "probs", "attn", "gate_logits", "gate",
		"attn_gated", "attn_out", "hidden_mid", "mlp_norm", "mlp_gate", "mlp_gelu", "mlp_up", "mlp_act", "mlp_out", "hidden_out"}
	names := map[string]map[string]bool{}
	for _, o := range []ExportOptions{{Context: 16}, {Context: 16, Granularity: "block", Layout: LayoutRoll}} {
		dir := export(t, tiedDir, o)
		man, err := ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		set := map[string]bool{}
		for _, g := range man.Graphs {
			produced := map[string]bool{}
			for _, n := range readModel(t, filepath.Join(dir, g.File)).Graph.Node {
				for _, out := range n.Output {
					produced[out] = true
				}
			}
			have := map[int]map[string]bool{}
			for _, v := range g.Values {
				if !produced[v.Name] {
					t.Errorf("%s: manifest value %s is not produced by any node", g.File, v.Name)
				}
				if have[v.Layer] == nil {
					have[v.Layer] = map[string]bool{}
				}
				have[v.Layer][v.Point] = true
				set[v.Name] = true
			}
			for _, li := range g.LayerInfos() {
				for _, p := range points {
					if !have[li.Layer][p] {
						t.Errorf("%s: layer %d has no value for point %s", g.File, li.Layer, p)
					}
				}
			}
		}
		for _, want := range []string{"layers.1/q_rope", "layers.1/mlp_act", "final_norm"} {
			if !set[want] {
				t.Errorf("%+v: no value %s", o, want)
			}
		}
		names[o.Granularity] = set
	}
	if !names[""]["layers.1/k_rope"] || !names["block"]["layers.1/k_rope"] {
		t.Error("layer and block exports name layer 1's k_rope differently")
	}
}
