package qnn

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"
	"sparkconv/spark"
	"sparkconv/synthetic"

	"google.golang.org/protobuf/proto"
)

// external appends an initializer whose bytes live in an external file
// (never allocated: only dims, data type and location are written).
func (b *tb) external(name string, dt onnxpb.TensorProto_DataType, dims ...int64) string {
	kv := func(k, v string) *onnxpb.StringStringEntryProto {
		return &onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)}
	}
	b.g.Initializer = append(b.g.Initializer, &onnxpb.TensorProto{Name: proto.String(name), Dims: dims,
		DataType:     proto.Int32(int32(dt)),
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{kv("location", "w.data"), kv("offset", "0"), kv("length", "0")}})
	return name
}

// weightGraph is a graph y = x holding external initializers of the given
// dims (type dt) beside it.
func weightGraph(dt onnxpb.TensorProto_DataType, dims ...[]int64) func() *tb {
	return func() *tb {
		b := newTB(17)
		b.opTo("y", "Identity", []string{b.in("x", tF32, 1, 4)})
		b.out("y", tF32, 1, 4)
		for i, d := range dims {
			b.external(fmt.Sprintf("w%d", i), dt, d...)
		}
		return b
	}
}

// weightCases are the rule's lint cases: just under, at and just over the
// limit in each width, and malformed dims.
func weightCases() []lintCase {
	const f16 = onnxpb.TensorProto_FLOAT16
	const i4 = onnxpb.TensorProto_INT4
	return []lintCase{
		{"weights at 2 GiB fp32", weightGraph(tF32, []int64{1 << 14, 1 << 15}), "weights-too-large", "", 0},
		{"weights 4 B under 2 GiB", weightGraph(tF32, []int64{1<<29 - 2}, []int64{1}), "weights-too-large", "", 0},
		{"weights 4 B over 2 GiB", weightGraph(tF32, []int64{1 << 14, 1 << 15}, []int64{1}), "weights-too-large", Error, 1},
		{"weights over 2 GiB in parts", weightGraph(tF32, []int64{1 << 28}, []int64{1 << 28}, []int64{8}), "weights-too-large", Error, 1},
		{"fp16 weights at 2 GiB", weightGraph(f16, []int64{1 << 30}), "weights-too-large", "", 0},
		{"fp16 weights 2 B over", weightGraph(f16, []int64{1 << 30}, []int64{1}), "weights-too-large", Error, 1},
		{"int4 weights at 2 GiB", weightGraph(i4, []int64{1 << 32}), "weights-too-large", "", 0},
		{"int4 weights 1 B over", weightGraph(i4, []int64{1<<32 + 1}), "weights-too-large", Error, 1},
		{"negative dim not counted", weightGraph(tF32, []int64{-1, 1 << 40}, []int64{4}), "weights-too-large", "", 0},
		{"overflowing dims", weightGraph(tF32, []int64{1 << 40, 1 << 40}), "weights-too-large", Error, 1},
		{"overflowing total", weightGraph(tF32, []int64{1 << 60}, []int64{1 << 60}), "weights-too-large", Error, 1},
		{"Constant over 2 GiB", func() *tb {
			b := weightGraph(tF32, []int64{1 << 29})()
			big := &onnxpb.TensorProto{Dims: []int64{1}, DataType: proto.Int32(int32(tF32)), FloatData: []float32{1}}
			b.opTo("c", "Constant", nil, &onnxpb.AttributeProto{Name: proto.String("value"), T: big,
				Type: onnxpb.AttributeProto_TENSOR.Enum()})
			return b
		}, "weights-too-large", Error, 1},
	}
}

func TestGraphWeights(t *testing.T) {
	kv := func(k, v string) *onnxpb.StringStringEntryProto {
		return &onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)}
	}
	for _, c := range []struct {
		name      string
		t         *onnxpb.TensorProto
		bytes     int64
		malformed int
		overflow  bool
	}{
		{"fp32 matrix", &onnxpb.TensorProto{Dims: []int64{3, 5}, DataType: proto.Int32(int32(tF32))}, 60, 0, false},
		{"scalar", &onnxpb.TensorProto{DataType: proto.Int32(int32(tI64))}, 8, 0, false},
		{"empty dim", &onnxpb.TensorProto{Dims: []int64{0, 1 << 62}, DataType: proto.Int32(int32(tF32))}, 0, 0, false},
		{"int4 odd count", &onnxpb.TensorProto{Dims: []int64{3}, DataType: proto.Int32(int32(onnxpb.TensorProto_UINT4))}, 2, 0, false},
		{"float8", &onnxpb.TensorProto{Dims: []int64{7}, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT8E4M3FN))}, 7, 0, false},
		{"complex128", &onnxpb.TensorProto{Dims: []int64{2}, DataType: proto.Int32(int32(onnxpb.TensorProto_COMPLEX128))}, 32, 0, false},
		{"strings", &onnxpb.TensorProto{Dims: []int64{2}, DataType: proto.Int32(int32(onnxpb.TensorProto_STRING)),
			StringData: [][]byte{[]byte("abc"), []byte("de")}}, 5, 0, false},
		{"unknown type, external length", &onnxpb.TensorProto{Dims: []int64{2}, DataType: proto.Int32(99),
			ExternalData: []*onnxpb.StringStringEntryProto{kv("location", "x"), kv("length", "1000")}}, 1000, 0, false},
		{"unknown type, bad length", &onnxpb.TensorProto{DataType: proto.Int32(99),
			ExternalData: []*onnxpb.StringStringEntryProto{kv("length", "-5"), kv("length", "x")}}, 0, 0, false},
		{"negative dim", &onnxpb.TensorProto{Dims: []int64{4, -2}, DataType: proto.Int32(int32(tF32))}, 0, 1, false},
		{"product past int64", &onnxpb.TensorProto{Dims: []int64{1 << 31, 1 << 31, 1 << 2}, DataType: proto.Int32(int32(tF32))}, math.MaxInt64, 0, true},
		{"bytes past int64", &onnxpb.TensorProto{Dims: []int64{1 << 62}, DataType: proto.Int32(int32(tF32))}, math.MaxInt64, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := GraphWeights(&onnxpb.GraphProto{Initializer: []*onnxpb.TensorProto{c.t}})
			if w.Bytes != c.bytes || w.Malformed != c.malformed || w.Overflow != c.overflow {
				t.Errorf("GraphWeights = %+v, want %d bytes, %d malformed, overflow %v", w, c.bytes, c.malformed, c.overflow)
			}
		})
	}
	if w := GraphWeights(nil); w != (Weights{}) {
		t.Errorf("GraphWeights(nil) = %+v", w)
	}
}

// TestWeightsFinding checks what the refusal says: the graph, its bytes,
// the limit and the fix.
func TestWeightsFinding(t *testing.T) {
	b := weightGraph(tF32, []int64{1 << 14, 1 << 15}, []int64{1 << 28})()
	b.g.Name = proto.String("layers_00_10")
	fs := findings(Lint(b.m), "weights-too-large")
	if len(fs) != 1 {
		t.Fatalf("findings %v", fs)
	}
	want := "graph layers_00_10 holds 3221225472 bytes (3.00 GiB) of weights in 2 tensors, above HTP's limit of 2147483648 bytes (2 GiB) per context binary"
	if fs[0].Message != want {
		t.Errorf("message\n%s\nwant\n%s", fs[0].Message, want)
	}
	for _, s := range []string{"at least 2 graphs", "export-onnx --layers", "the embedding and the head", "docs/qnn.md#htps-weight-limit"} {
		if !strings.Contains(fs[0].Fix, s) {
			t.Errorf("fix %q lacks %q", fs[0].Fix, s)
		}
	}
}

// sparkGraphs lists the weights of each graph sparkconv's export makes of
// cfg, from the spark package's tensor list: the embedding, each layer's
// tensors, and the head (the final norm and the head matrix, a copy of the
// embedding when tied).
func sparkGraphs(cfg *spark.Config) (embed []spark.TensorSpec, layers [][]spark.TensorSpec, head []spark.TensorSpec) {
	layers = make([][]spark.TensorSpec, cfg.NumLayers)
	for _, s := range cfg.Tensors() {
		switch {
		case s.Layer >= 0:
			layers[s.Layer] = append(layers[s.Layer], s)
		case s.Kind == spark.KindEmbedding:
			embed = append(embed, s)
			if cfg.TieWordEmbeddings {
				head = append(head, s)
			}
		default: // the final norm, an untied head
			head = append(head, s)
		}
	}
	return embed, layers, head
}

// specGraph is a graph holding specs as external initializers of type dt.
func specGraph(dt onnxpb.TensorProto_DataType, specs ...[]spark.TensorSpec) *onnxpb.ModelProto {
	b := weightGraph(dt)()
	for _, ss := range specs {
		for _, s := range ss {
			b.external(s.Name+strconv.Itoa(len(b.g.Initializer)), dt, s.Shape...)
		}
	}
	return b.m
}

// fullConfig is the real Spark-X2.5 shape (synthetic's full preset) as a
// parsed config.
func fullConfig(t *testing.T) *spark.Config {
	s := synthetic.Presets["full"]
	types := make([]string, s.Layers)
	for i := range types {
		types[i] = "sliding_attention"
		if i%4 == 3 {
			types[i] = "full_attention"
		}
	}
	data, err := json.Marshal(map[string]any{"model_type": "spark2_5", "vocab_size": s.Vocab, "hidden_size": s.Hidden,
		"intermediate_size": s.Intermediate, "num_hidden_layers": s.Layers, "num_attention_heads": s.Heads,
		"num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim, "hidden_act": "gelu", "rms_norm_eps": 1e-6,
		"max_position_embeddings": 32768, "tie_word_embeddings": true, "sliding_window": s.Window, "layer_types": types,
		"rope_theta": 5e6, "partial_rotary_factor": 0.25, "sliding_rope_theta": 1e4})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := spark.ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestSparkGraphWeights is docs/qnn.md#htps-weight-limit's table: the
// weight bytes of each graph of the real Spark-X2.5-1.7B shape in fp32 and
// fp16, and how many layers one graph can hold under the limit (the graph
// of that many layers passes the lint, one more is refused).
func TestSparkGraphWeights(t *testing.T) {
	cfg := fullConfig(t)
	if cfg.HiddenSize != 2048 || cfg.VocabSize != 131072 || cfg.NumLayers != 28 || cfg.IntermediateSize != 6656 {
		t.Fatalf("full preset changed: %s", cfg.Summary())
	}
	embed, layers, head := sparkGraphs(cfg)
	for _, c := range []struct {
		name                    string
		dt                      onnxpb.TensorProto_DataType
		layer, embed, head, all int64
		maxLayers               int
	}{
		// A layer: qkv 3072x2048, g_proj 8x2048, o_proj 2048x2048,
		// gate/up 6656x2048, down 2048x6656, two norms of 2048:
		// 51 400 704 parameters. The head: 131072x2048 + the final norm.
		{"fp32", tF32, 205_602_816, 1 << 30, 1_073_750_016, 1<<30 + 28*205_602_816 + 1_073_750_016, 10},
		{"fp16", onnxpb.TensorProto_FLOAT16, 102_801_408, 1 << 29, 536_875_008, 1<<29 + 28*102_801_408 + 536_875_008, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i, l := range layers {
				if got := GraphWeights(specGraph(c.dt, l).GetGraph()).Bytes; got != c.layer {
					t.Errorf("layer %d: %d bytes, want %d", i, got, c.layer)
				}
			}
			for _, g := range []struct {
				name  string
				specs []spark.TensorSpec
				want  int64
			}{{"embed", embed, c.embed}, {"head", head, c.head}} {
				m := specGraph(c.dt, g.specs)
				if got := GraphWeights(m.GetGraph()).Bytes; got != g.want {
					t.Errorf("%s: %d bytes, want %d", g.name, got, g.want)
				}
				if fs := Lint(m); len(fs) != 0 {
					t.Errorf("%s: %v", g.name, fs)
				}
			}
			if got := GraphWeights(specGraph(c.dt, layers[:4]...).GetGraph()).Bytes; got != 4*c.layer {
				t.Errorf("block of 4 layers: %d bytes, want %d", got, 4*c.layer)
			}
			// The whole model in one graph is refused.
			all := specGraph(c.dt, append(append([][]spark.TensorSpec{embed}, layers...), head)...)
			if got := GraphWeights(all.GetGraph()).Bytes; got != c.all {
				t.Errorf("whole model: %d bytes, want %d", got, c.all)
			}
			if len(findings(Lint(all), "weights-too-large")) != 1 {
				t.Error("the whole model in one graph is not refused")
			}
			// The most layers one graph holds.
			fits := 0
			for k := 1; k <= cfg.NumLayers; k++ {
				if len(findings(Lint(specGraph(c.dt, layers[:k]...)), "weights-too-large")) > 0 {
					break
				}
				fits = k
			}
			if fits != c.maxLayers {
				t.Errorf("%d layers fit one graph, want %d", fits, c.maxLayers)
			}
		})
	}
}

// TestSparkGraphsMatchExport checks sparkGraphs against what onnxgraph
// (code this package did not write) exports of the golden mini model: each
// graph's weights are the spark tensors this test assigns it, plus the
// graph's few small constants (epsilons, shapes, scales).
func TestSparkGraphsMatchExport(t *testing.T) {
	dir := "../testdata/golden/spark-mini-tied"
	m, err := spark.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	embed, layers, head := sparkGraphs(m.Config)
	bytesOf := func(specs []spark.TensorSpec, elem int64) int64 {
		var n int64
		for _, s := range specs {
			k := elem
			for _, d := range s.Shape {
				k *= d
			}
			n += k
		}
		return n
	}
	for _, o := range []onnxgraph.ExportOptions{{Layout: "auto", Context: 32}, {Layout: "auto", Context: 32, DType: onnxgraph.Float16}} {
		out := t.TempDir()
		man, err := onnxgraph.Export(context.Background(), m, out, o)
		if err != nil {
			t.Fatal(err)
		}
		elem := int64(4)
		if o.DType == onnxgraph.Float16 {
			elem = 2
		}
		for _, g := range man.Graphs {
			mp, err := onnxio.ReadModelFile(filepath.Join(out, g.File))
			if err != nil {
				t.Fatal(err)
			}
			var want int64
			switch g.Kind {
			case onnxgraph.KindEmbed:
				want = bytesOf(embed, elem)
			case onnxgraph.KindHead:
				want = bytesOf(head, elem)
			case onnxgraph.KindLayer:
				want = bytesOf(layers[g.Layer], elem)
			default:
				t.Fatalf("graph %s of kind %s", g.Name, g.Kind)
			}
			got := GraphWeights(mp.GetGraph())
			if got.Malformed != 0 || got.Overflow || got.Bytes < want || got.Bytes > want+256 {
				t.Errorf("%s (%v): %+v, want the spark tensors' %d bytes plus at most 256 of constants", g.Name, o.DType, got, want)
			}
		}
	}
}
