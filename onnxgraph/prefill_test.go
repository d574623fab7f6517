package onnxgraph_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	. "sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"
	"sparkconv/spark"
)

// TestPrefillContract pins the prefill graphs of docs/formats.md#prefill-graphs
// for the mini model (H 128, KV 2, D 32, window 8, sssf sssf) at N = 16:
// names, shapes, the "decode" key, the one weights file a graph and its
// prefill graph share (and nothing else refers to), the head untouched.
func TestPrefillContract(t *testing.T) {
	dir := export(t, tiedDir, ExportOptions{Context: 40, Prefill: 16})
	plain := export(t, tiedDir, ExportOptions{Context: 40})
	man, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if man.Prefill == nil || man.Prefill.Tokens != 16 || len(man.Prefill.Graphs) != 9 || len(man.Graphs) != 10 {
		t.Fatalf("prefill %+v, %d decode graphs", man.Prefill, len(man.Graphs))
	}
	f32 := "float32"
	want := map[string]GraphEntry{
		"embed_prefill.onnx": {Kind: KindEmbed, Decode: "embed",
			Inputs: []TensorSpec{tensor("input_ids", "int64", 1, 16)}, Outputs: []TensorSpec{tensor("hidden_out", f32, 1, 16, 128)}},
		"layer_00_prefill.onnx": {Kind: KindLayer, Decode: "layer_00",
			LayerInfo: &LayerInfo{Layer: 0, LayerType: "sliding_attention", Layout: "ring", CacheSlots: 7, RotaryDims: 32, RopeTheta: 10000},
			Inputs: []TensorSpec{tensor("hidden_in", f32, 1, 16, 128), tensor("rope_cos", f32, 1, 16, 16), tensor("rope_sin", f32, 1, 16, 16),
				tensor("past_key", f32, 1, 2, 32, 7), tensor("past_value", f32, 1, 2, 7, 32), tensor("attention_mask", f32, 1, 1, 16, 23)},
			Outputs: []TensorSpec{tensor("hidden_out", f32, 1, 16, 128), tensor("new_key", f32, 1, 2, 32, 16), tensor("new_value", f32, 1, 2, 16, 32)}},
		// A roll layer's prefill graph returns the new entries too.
		"layer_03_prefill.onnx": {Kind: KindLayer, Decode: "layer_03",
			LayerInfo: &LayerInfo{Layer: 3, LayerType: "full_attention", Layout: "roll", CacheSlots: 39, RotaryDims: 8, RopeTheta: 5e6},
			Inputs: []TensorSpec{tensor("hidden_in", f32, 1, 16, 128), tensor("rope_cos", f32, 1, 16, 4), tensor("rope_sin", f32, 1, 16, 4),
				tensor("past_key", f32, 1, 2, 32, 39), tensor("past_value", f32, 1, 2, 39, 32), tensor("attention_mask", f32, 1, 1, 16, 55)},
			Outputs: []TensorSpec{tensor("hidden_out", f32, 1, 16, 128), tensor("new_key", f32, 1, 2, 32, 16), tensor("new_value", f32, 1, 2, 16, 32)}},
	}
	decode := map[string]GraphEntry{}
	for _, g := range man.Graphs {
		decode[g.Name] = g
	}
	for _, g := range man.Prefill.Graphs {
		if w, ok := want[g.File]; ok {
			if g.Kind != w.Kind || g.Decode != w.Decode || !reflect.DeepEqual(g.LayerInfo, w.LayerInfo) || !reflect.DeepEqual(g.Inputs, w.Inputs) || !reflect.DeepEqual(g.Outputs, w.Outputs) {
				t.Errorf("%s:\n got %s %s %+v %v %v\nwant %s %s %+v %v %v", g.File, g.Kind, g.Decode, g.LayerInfo, g.Inputs, g.Outputs, w.Kind, w.Decode, w.LayerInfo, w.Inputs, w.Outputs)
			}
		}
		d := decode[g.Decode]
		if g.File != d.Name+PrefillSuffix+".onnx" || g.ExternalData == nil || d.ExternalData == nil || *g.ExternalData != *d.ExternalData || g.ExternalData.Name != d.Name+".data" {
			t.Errorf("%s and %s: weights %+v and %+v", g.File, d.File, g.ExternalData, d.ExternalData)
		}
		// Both files refer to the shared file only, for the same tensors.
		ext := func(file string) map[string]string {
			m := readModel(t, filepath.Join(dir, file))
			if locs := onnxio.ExternalLocations(m); !reflect.DeepEqual(locs, []string{d.Name + ".data"}) {
				t.Errorf("%s: external locations %v", file, locs)
			}
			out := map[string]string{}
			for _, in := range m.Graph.Initializer {
				if in.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
					out[in.GetName()] = strings.TrimSpace(in.String())
				}
			}
			return out
		}
		if a, b := ext(d.File), ext(g.File); len(a) == 0 || !reflect.DeepEqual(a, b) {
			t.Errorf("%s and %s refer to different weights:\n%v\n%v", d.File, g.File, a, b)
		}
	}
	head := decode["head"]
	x, _ := os.ReadFile(filepath.Join(dir, "head.onnx"))
	y, _ := os.ReadFile(filepath.Join(plain, "head.onnx"))
	if head.ExternalData != nil || !bytes.Equal(x, y) {
		t.Errorf("the head changed with --prefill")
	}
	// The shared weights hold each weight once: the export is the plain
	// one's size plus the prefill graphs' structure, not twice the weights.
	size := func(d string) (n int64) {
		es, _ := os.ReadDir(d)
		for _, e := range es {
			if fi, _ := e.Info(); fi != nil && e.Name() != ManifestFile {
				n += fi.Size()
			}
		}
		return n
	}
	if a, b := size(plain), size(dir); b > a+a/4 {
		t.Errorf("export with prefill graphs %d bytes, without %d", b, a)
	}
}

// TestParsePrefill: the manifest's prefill object is checked with the rest.
func TestParsePrefill(t *testing.T) {
	dir := export(t, tiedDir, ExportOptions{Context: 40, Prefill: 16, Layers: []int{0}})
	good, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseManifest(good); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"tokens": 16`, `"tokens": 40`, "prefill.tokens = 40"},
		{`"decode": "layer_00"`, `"decode": "layer_09"`, `decode "layer_09" names no graph`},
		{`"name": "layer_00_prefill"`, `"name": "layer_00"`, `name "layer_00" used twice`},
	} {
		bad := bytes.Replace(good, []byte(c.from), []byte(c.to), 1)
		if bytes.Equal(bad, good) {
			t.Fatalf("%s not in the manifest", c.from)
		}
		if _, err := ParseManifest(bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: %v, want %q", c.from, c.to, err, c.want)
		}
	}
	m, err := spark.Open(tiedDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := GraphCount(m.Config, ExportOptions{Context: 40, Prefill: 40}); err == nil || !strings.Contains(err.Error(), "prefill 40") {
		t.Errorf("prefill >= context: %v", err)
	}
	if n, err := GraphCount(m.Config, ExportOptions{Context: 40, Prefill: 8}); err != nil || n != 19 {
		t.Errorf("GraphCount with prefill = %d, %v; want 19", n, err)
	}
}
