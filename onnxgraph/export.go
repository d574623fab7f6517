package onnxgraph

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sparkconv/onnxio"
	"sparkconv/spark"
)

// ExportOptions are the export-onnx flags.
type ExportOptions struct {
	Layout      string // ring, roll or auto (ring sliding, roll full)
	Context     int    // full layers hold Context-1 slots
	DType       DType  // Float32 or Float16: every float input, output and weight
	Granularity string // layer or block
	// GELU is erf or tanh; "" follows config.json's hidden_act.
	GELU string
	// Layers selects the layer indices to export; nil means all. The embed
	// graph is written when layer 0 is selected, the head when the last
	// layer is: disjoint ranges shard an export with each graph written once.
	Layers []int
	// MaskValue is what the runtime writes for an empty slot (default -1e4).
	MaskValue float64
	// Prefill, when > 0, adds per embed, layer or block graph a prefill
	// graph taking Prefill tokens at once (docs/formats.md#prefill-graphs);
	// the decode graph and its prefill graph then keep their weights in
	// one shared "<graph>.data" file. 0 writes the decode step only.
	Prefill int
	// Write tunes external data (tests lower the 2 GiB threshold).
	Write onnxio.WriteOptions
	// Done, if set, is called after each file with its name and size.
	Done func(file string, bytes int64)
}

// DefaultMaskValue is the manifest's mask_value unless overridden.
const DefaultMaskValue = -10000.0

func (o *ExportOptions) normalize(c *spark.Config) error {
	if o.Layout == "" {
		o.Layout = LayoutAuto
	}
	if o.Layout != LayoutRing && o.Layout != LayoutRoll && o.Layout != LayoutAuto {
		return fmt.Errorf("layout %q: want ring, roll or auto", o.Layout)
	}
	if o.Context == 0 {
		o.Context = 1024
	}
	if o.Context < 2 {
		return fmt.Errorf("context %d: must be >= 2", o.Context)
	}
	if o.DType == 0 {
		o.DType = Float32
	}
	if o.DType != Float32 && o.DType != Float16 {
		return fmt.Errorf("dtype %s: want float32 or float16", o.DType)
	}
	if o.Granularity == "" {
		o.Granularity = "layer"
	}
	if o.Granularity != "layer" && o.Granularity != "block" {
		return fmt.Errorf("granularity %q: want layer or block", o.Granularity)
	}
	if o.GELU == "" {
		o.GELU = "erf"
		if c.TanhGELU() {
			o.GELU = "tanh"
		}
	}
	if o.GELU != "erf" && o.GELU != "tanh" {
		return fmt.Errorf("gelu %q: want erf or tanh", o.GELU)
	}
	if o.MaskValue == 0 {
		o.MaskValue = DefaultMaskValue
	}
	if o.Prefill < 0 || o.Prefill >= o.Context {
		return fmt.Errorf("prefill %d tokens: want 0 (none) or 1..%d (below the context of %d)", o.Prefill, o.Context-1, o.Context)
	}
	if !(o.MaskValue < 0) || math.IsInf(o.MaskValue, 0) || (o.DType == Float16 && o.MaskValue < -65504) {
		return fmt.Errorf("mask value %v: must be finite, negative (and >= -65504 for float16)", o.MaskValue)
	}
	if o.Layers == nil {
		for i := range c.NumLayers {
			o.Layers = append(o.Layers, i)
		}
	}
	seen := map[int]bool{}
	for _, i := range o.Layers {
		if i < 0 || i >= c.NumLayers || seen[i] {
			return fmt.Errorf("layer %d: out of range 0..%d or repeated", i, c.NumLayers-1)
		}
		seen[i] = true
	}
	return nil
}

// ParseLayers reads a --layers value: "all", "5", "0-27", "0-3,8,12-15".
func ParseLayers(s string, numLayers int) ([]int, error) {
	if s == "" || s == "all" {
		return nil, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("layers %q: %q is not a layer index", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("layers %q: %q is not a range", s, part)
			}
		}
		if a < 0 || b < a || b >= numLayers {
			return nil, fmt.Errorf("layers %q: %q outside 0..%d", s, part, numLayers-1)
		}
		for i := a; i <= b; i++ {
			if seen[i] {
				return nil, fmt.Errorf("layers %q: layer %d given twice", s, i)
			}
			seen[i] = true
			out = append(out, i)
		}
	}
	return out, nil
}

// layerPlan is what one layer's graph section needs to know.
type layerPlan struct {
	LayerInfo
	sliding bool
}

func planLayer(c *spark.Config, i int, o *ExportOptions) layerPlan {
	p := layerPlan{sliding: c.IsSliding(i)}
	p.Layer = i
	p.LayerType = string(c.LayerTypes[i])
	p.Layout = o.Layout
	if o.Layout == LayoutAuto {
		p.Layout = LayoutRoll
		if p.sliding {
			p.Layout = LayoutRing
		}
	}
	p.CacheSlots = c.CacheSlots(i, o.Context)
	p.RotaryDims = c.RotaryDims(i)
	p.RopeTheta = c.RoPEFor(i).Theta
	return p
}

// exporter writes the graphs of one export.
type exporter struct {
	ctx context.Context
	m   *spark.Model
	c   *spark.Config
	o   ExportOptions
	dir string
	// n is the token count of the graph being built: 1 for the decode
	// step, o.Prefill for a prefill graph.
	n int
	// values collects the current graph's named values.
	values []ValueName
}

// GraphCount is how many graph files Export writes for these options.
func GraphCount(c *spark.Config, o ExportOptions) (int, error) {
	if err := o.normalize(c); err != nil {
		return 0, err
	}
	e := &exporter{c: c, o: o}
	g, err := e.groups()
	n := len(g)
	if contains(o.Layers, 0) {
		n++
	}
	if o.Prefill > 0 {
		n *= 2
	}
	if contains(o.Layers, c.NumLayers-1) {
		n++
	}
	return n, err
}

// Export writes the decode-step graphs of model m and manifest.json into
// dir (an empty folder: the caller makes the output atomic) and returns the
// manifest.
func Export(ctx context.Context, m *spark.Model, dir string, o ExportOptions) (*Manifest, error) {
	c := m.Config
	if err := o.normalize(c); err != nil {
		return nil, err
	}
	e := &exporter{ctx: ctx, m: m, c: c, o: o, dir: dir, n: 1}
	man := &Manifest{
		Format: ManifestFormat, Version: 1, Producer: Producer, Opset: Opset,
		Context: o.Context, DType: o.DType.String(), MaskValue: o.MaskValue,
		GELU: o.GELU, Granularity: o.Granularity, Layout: o.Layout,
		Partial: len(o.Layers) != c.NumLayers,
	}
	var err error
	if man.Config, err = configKeys(m); err != nil {
		return nil, err
	}
	fp, err := SourceFingerprint(m)
	if err != nil {
		return nil, err
	}
	man.Source = &Source{Fingerprint: fp, Method: FingerprintMethod}
	groups, err := e.groups()
	if err != nil {
		return nil, err
	}
	if o.Prefill > 0 {
		man.Prefill = &Prefill{Tokens: o.Prefill}
	}
	if contains(o.Layers, 0) {
		if err := e.addPair(man, e.embed); err != nil {
			return nil, err
		}
	}
	for _, g := range groups {
		if err := e.addPair(man, func() (*Builder, GraphEntry, error) { return e.layers(g) }); err != nil {
			return nil, err
		}
	}
	if contains(o.Layers, c.NumLayers-1) {
		if err := e.add(man, e.head); err != nil {
			return nil, err
		}
	}
	data, err := man.Marshal()
	if err != nil {
		return nil, err
	}
	// The export folder is fsynced whole when its outdir commits.
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", ManifestFile, err)
	}
	return man, nil
}

// groups splits the selected layers into graphs: one each, or blocks of
// layers 4k..4k+3 that must be selected whole.
func (e *exporter) groups() ([][]int, error) {
	var out [][]int
	if e.o.Granularity == "layer" {
		for _, i := range e.o.Layers {
			out = append(out, []int{i})
		}
		return out, nil
	}
	sel := map[int]bool{}
	for _, i := range e.o.Layers {
		sel[i] = true
	}
	for start := 0; start < e.c.NumLayers; start += 4 {
		var blk []int
		for i := start; i < min(start+4, e.c.NumLayers); i++ {
			if sel[i] {
				blk = append(blk, i)
			}
		}
		if len(blk) == 0 {
			continue
		}
		if len(blk) != min(4, e.c.NumLayers-start) {
			return nil, fmt.Errorf("granularity block: layers %v select part of block %d (layers %d..%d); select whole blocks", blk, start/4, start, min(start+4, e.c.NumLayers)-1)
		}
		out = append(out, blk)
	}
	return out, nil
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// add builds one graph, writes it and records it in the manifest.
func (e *exporter) add(man *Manifest, build func() (*Builder, GraphEntry, error)) error {
	if err := e.ctx.Err(); err != nil {
		return err
	}
	e.values = nil
	b, g, err := build()
	if err != nil {
		return err
	}
	g.Values = e.values
	info, err := b.WriteFile(e.dir, g.File, e.o.Write)
	if err != nil {
		return err
	}
	// The graph's weights are on disk now: drop the checkpoint pages they
	// were read from, so the resident set stays near one graph.
	e.m.ReleaseAll()
	written(&g, b, info)
	man.Graphs = append(man.Graphs, g)
	if e.o.Done != nil {
		size := info.Size
		if info.External != nil {
			size += info.External.Size
		}
		e.o.Done(g.File, size)
	}
	return nil
}

// written fills in the manifest entry of graph b, written as info.
func written(g *GraphEntry, b *Builder, info onnxio.FileInfo) {
	g.Opset, g.SHA256, g.Bytes, g.ExternalData = Opset, info.SHA256, info.Size, info.External
	for _, v := range b.Inputs() {
		g.Inputs = append(g.Inputs, TensorSpec{Name: v.Name, Shape: v.Shape, DType: v.DType.String()})
	}
	for _, v := range b.Outputs() {
		g.Outputs = append(g.Outputs, TensorSpec{Name: v.Name, Shape: v.Shape, DType: v.DType.String()})
	}
}

// configKeys copies the config.json keys the graphs are built from, as
// written there (so each equals config.json byte for byte).
func configKeys(m *spark.Model) (map[string]json.RawMessage, error) {
	// The config.json bytes read when the model was opened, never the
	// folder again (it may have been replaced since).
	path := filepath.Join(m.Dir, spark.ConfigFile)
	var all map[string]json.RawMessage
	if err := json.Unmarshal(m.ConfigJSON, &all); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	keys := []string{"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
		"num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps",
		"tie_word_embeddings", "sliding_window", "layer_types", "rope_theta", "partial_rotary_factor",
		"sliding_rope_theta", "sliding_partial_rotary_factor", "rope_parameters"}
	out := map[string]json.RawMessage{}
	for _, k := range keys {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

// vector returns a checkpoint tensor converted to the export dtype and its
// element count.
func (e *exporter) vector(name string) (Data, int64, error) {
	ti, raw, err := e.m.Raw(name)
	if err != nil {
		return nil, 0, err
	}
	d, err := ConvertRaw(raw, ti.DType, e.o.DType)
	if err != nil {
		return nil, 0, fmt.Errorf("tensor %s: %w", name, err)
	}
	return d, ti.NumElements(), nil
}

// linearT returns rows [r0, r0+n) of a [out, in] checkpoint linear,
// transposed to [in, n] for MatMul.
func (e *exporter) linearT(name string, r0, n int) (Data, []int64, error) {
	ti, raw, err := e.m.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	if len(ti.Shape) != 2 || int64(r0+n) > ti.Shape[0] {
		return nil, nil, fmt.Errorf("tensor %s: shape %v has no rows %d..%d", name, ti.Shape, r0, r0+n)
	}
	in := int(ti.Shape[1])
	es := ti.DType.Size()
	d, err := TransposeRaw(raw[r0*in*es:(r0+n)*in*es], ti.DType, e.o.DType, n, in)
	if err != nil {
		return nil, nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return d, []int64{int64(in), int64(n)}, nil
}

func (e *exporter) addLinear(b *Builder, name, src string, r0, n int) (string, error) {
	d, shape, err := e.linearT(src, r0, n)
	if err != nil {
		return "", err
	}
	return b.Initializer(name, e.o.DType, shape, d), nil
}

func (e *exporter) addVector(b *Builder, name, src string) (string, error) {
	d, n, err := e.vector(src)
	if err != nil {
		return "", err
	}
	return b.Initializer(name, e.o.DType, []int64{n}, d), nil
}

func (e *exporter) embed() (*Builder, GraphEntry, error) {
	c, dt := e.c, e.o.DType
	n := int64(e.n)
	name := e.graphName("embed")
	b := New(name, dt)
	ids := b.Input("input_ids", Int64, 1, n)
	ti, raw, err := e.m.Raw(spark.EmbedName)
	if err != nil {
		return nil, GraphEntry{}, err
	}
	d, err := ConvertRaw(raw, ti.DType, dt)
	if err != nil {
		return nil, GraphEntry{}, fmt.Errorf("tensor %s: %w", spark.EmbedName, err)
	}
	w := b.Initializer(spark.EmbedName, dt, []int64{int64(c.VocabSize), int64(c.HiddenSize)}, d)
	b.OpTo(e.value("hidden_out", ModelLevel, "embed"), "Gather", []string{w, ids}, AttrInt("axis", 0))
	b.Output("hidden_out", dt, 1, n, int64(c.HiddenSize))
	return b, GraphEntry{Name: name, File: name + ".onnx", Kind: KindEmbed}, nil
}

func (e *exporter) head() (*Builder, GraphEntry, error) {
	c, dt := e.c, e.o.DType
	b := New("head", dt)
	x := b.Input("hidden_in", dt, 1, 1, int64(c.HiddenSize))
	norm, err := e.addVector(b, spark.NormName, spark.NormName)
	if err != nil {
		return nil, GraphEntry{}, err
	}
	w, err := e.addLinear(b, c.HeadWeight()+"_T", c.HeadWeight(), 0, c.VocabSize)
	if err != nil {
		return nil, GraphEntry{}, err
	}
	b.SetPrefix("head")
	h := b.RMSNorm(e.value("final_norm", ModelLevel, "final_norm"), x, norm, c.RMSNormEps)
	b.OpTo("logits", "MatMul", []string{h, w})
	b.Output("logits", dt, 1, 1, int64(c.VocabSize))
	tied := c.TieWordEmbeddings
	return b, GraphEntry{Name: "head", File: "head.onnx", Kind: KindHead, Tied: &tied}, nil
}

// layers builds a layer graph (one index) or a block graph.
func (e *exporter) layers(idx []int) (*Builder, GraphEntry, error) {
	c, dt := e.c, e.o.DType
	kind, name := KindLayer, fmt.Sprintf("layer_%02d", idx[0])
	if e.o.Granularity == "block" {
		kind, name = KindBlock, fmt.Sprintf("block_%02d", idx[0]/4)
	}
	name = e.graphName(name)
	n := int64(e.n)
	b := New(name, dt)
	x := b.Input("hidden_in", dt, 1, n, int64(c.HiddenSize))
	g := GraphEntry{Name: name, File: name + ".onnx", Kind: kind}
	var outs []ValueInfo
	for k, i := range idx {
		p := planLayer(c, i, &e.o)
		outName := ""
		if k == len(idx)-1 {
			outName = "hidden_out"
		}
		var lo []ValueInfo
		var err error
		x, lo, err = e.layer(b, p, LayerSuffix(kind, i), x, outName)
		if err != nil {
			return nil, GraphEntry{}, fmt.Errorf("layer %d: %w", i, err)
		}
		outs = append(outs, lo...)
		if kind == KindLayer {
			li := p.LayerInfo
			g.LayerInfo = &li
		} else {
			g.Layers = append(g.Layers, p.LayerInfo)
		}
	}
	b.Output("hidden_out", dt, 1, n, int64(c.HiddenSize))
	for _, v := range outs {
		b.Output(v.Name, v.DType, v.Shape...)
	}
	return b, g, nil
}

// layerWeights adds layer i's weights, [in, out] for MatMul.
type layerWeights struct {
	inNorm, q, k, v, g, o, postNorm, gate, up, down string
}

func (e *exporter) layerWeights(b *Builder, i int) (layerWeights, error) {
	c := e.c
	qd, kvd, inter := c.QDim(), c.KVDim(), c.IntermediateSize
	var w layerWeights
	mod := func(m string) string { return spark.LayerWeight(i, m) }
	pfx := fmt.Sprintf("model.layers.%d.", i)
	steps := []struct {
		dst       *string
		name, src string
		r0, n     int // linear rows; n == 0 for a vector
	}{
		{&w.inNorm, mod(spark.InputNorm), mod(spark.InputNorm), 0, 0},
		{&w.q, pfx + "self_attn.q_proj.weight_T", mod(spark.QKV), 0, qd},
		{&w.k, pfx + "self_attn.k_proj.weight_T", mod(spark.QKV), qd, kvd},
		{&w.v, pfx + "self_attn.v_proj.weight_T", mod(spark.QKV), qd + kvd, kvd},
		{&w.g, mod(spark.GateProj) + "_T", mod(spark.GateProj), 0, c.NumHeads},
		{&w.o, mod(spark.OProj) + "_T", mod(spark.OProj), 0, c.HiddenSize},
		{&w.postNorm, mod(spark.PostNorm), mod(spark.PostNorm), 0, 0},
		{&w.gate, mod(spark.MLPGate) + "_T", mod(spark.MLPGate), 0, inter},
		{&w.up, mod(spark.MLPUp) + "_T", mod(spark.MLPUp), 0, inter},
		{&w.down, mod(spark.MLPDown) + "_T", mod(spark.MLPDown), 0, c.HiddenSize},
	}
	for _, s := range steps {
		var err error
		if s.n == 0 {
			*s.dst, err = e.addVector(b, s.name, s.src)
		} else {
			*s.dst, err = e.addLinear(b, s.name, s.src, s.r0, s.n)
		}
		if err != nil {
			return w, err
		}
	}
	return w, nil
}

// layerIO names one layer's graph inputs.
type layerIO struct {
	cos, sin, pastK, pastV, mask string
}

// layer appends one decoder layer reading residual x and returns the new
// residual and the layer's cache outputs. outName names the residual when
// it is the graph output.
func (e *exporter) layer(b *Builder, p layerPlan, sfx, x, outName string) (string, []ValueInfo, error) {
	c, dt := e.c, e.o.DType
	kv, d, slots, half := int64(c.NumKVHeads), int64(c.HeadDim), int64(p.CacheSlots), int64(p.RotaryDims/2)
	n := int64(e.n)
	b.SetPrefix(LayerScope(p.Layer))
	defer b.SetPrefix("")
	io := layerIO{
		cos:   b.Input("rope_cos"+sfx, dt, 1, n, half),
		sin:   b.Input("rope_sin"+sfx, dt, 1, n, half),
		pastK: b.Input("past_key"+sfx, dt, 1, kv, d, slots),
		pastV: b.Input("past_value"+sfx, dt, 1, kv, slots, d),
		mask:  b.Input("attention_mask"+sfx, dt, 1, 1, n, slots+n),
	}
	w, err := e.layerWeights(b, p.Layer)
	if err != nil {
		return "", nil, err
	}
	pt := func(point string) string { return e.value(LayerScope(p.Layer)+"/"+point, p.Layer, point) }
	h := b.RMSNorm(pt("attn_norm"), x, w.inNorm, c.RMSNormEps)
	attention := e.attention
	if e.n > 1 {
		attention = e.prefillAttention
	}
	attn, outs := attention(b, p, sfx, io, h, w, pt)
	x = b.OpTo(pt("hidden_mid"), "Add", []string{x, b.OpTo(pt("attn_out"), "MatMul", []string{attn, w.o})})
	down := e.mlp(b, b.RMSNorm(pt("mlp_norm"), x, w.postNorm, c.RMSNormEps), w, pt)
	if outName == "" {
		outName = pt("hidden_out")
	} else {
		e.value(outName, p.Layer, "hidden_out")
	}
	return b.OpTo(outName, "Add", []string{x, down}), outs, nil
}

// attention emits the gated GQA attention of normed input h over the cache
// and the new token; it returns the heads concatenated [1,1,heads*d]
// (before o_proj) and the cache outputs of the layer's layout. pt names a
// value after the forward's point.
func (e *exporter) attention(b *Builder, p layerPlan, sfx string, io layerIO, h string, w layerWeights, pt func(string) string) (string, []ValueInfo) {
	c, dt := e.c, e.o.DType
	kv, d, heads := int64(c.NumKVHeads), int64(c.HeadDim), int64(c.NumHeads)
	grp, slots, half := heads/kv, int64(p.CacheSlots), int64(p.RotaryDims/2)
	// GQA: query head h = kv*grp + g, so [1,1,heads*d] is [1,kv,grp,d].
	q := b.Reshape(b.OpTo(pt("q"), "MatMul", []string{h, w.q}), 1, kv, grp, d)
	q = b.RoPE(pt("q_rope"), q, io.cos, io.sin, half, d)
	q = b.OpTo(pt("q_scaled"), "Mul", []string{q, b.Scalar(1 / math.Sqrt(float64(d)))})
	k := b.Reshape(b.OpTo(pt("k"), "MatMul", []string{h, w.k}), 1, kv, 1, d)
	k = b.RoPE(pt("k_rope"), k, io.cos, io.sin, half, d)
	v := b.OpTo(pt("v"), "MatMul", []string{h, w.v})

	var outs []ValueInfo
	kName, vName := "", ""
	if p.Layout == LayoutRing {
		kName, vName = "new_key"+sfx, "new_value"+sfx
		outs = append(outs, ValueInfo{kName, []int64{1, kv, d, 1}, dt}, ValueInfo{vName, []int64{1, kv, 1, d}, dt})
	}
	// With one token, [1,kv,1,d] -> [1,kv,d,1] is a reshape, not a transpose.
	newK := b.ReshapeTo(kName, k, 1, kv, d, 1)
	newV := b.ReshapeTo(vName, v, 1, kv, 1, d)
	keys := b.OpTo(pt("keys"), "Concat", []string{io.pastK, newK}, AttrInt("axis", 3))   // [1,kv,d,slots+1]
	vals := b.OpTo(pt("values"), "Concat", []string{io.pastV, newV}, AttrInt("axis", 2)) // [1,kv,slots+1,d]
	scores := b.OpTo(pt("scores"), "MatMul", []string{q, keys})                          // [1,kv,grp,slots+1]
	masked := b.OpTo(pt("scores_masked"), "Add", []string{scores, io.mask})
	probs := b.OpTo(pt("probs"), "Softmax", []string{masked}, AttrInt("axis", -1))
	attn := b.OpTo(pt("attn"), "MatMul", []string{probs, vals}) // [1,kv,grp,d]
	if p.Layout == LayoutRoll {
		b.OpTo("present_key"+sfx, "Slice", []string{keys, b.Int64s(1), b.Int64s(slots + 1), b.Int64s(3)})
		b.OpTo("present_value"+sfx, "Slice", []string{vals, b.Int64s(1), b.Int64s(slots + 1), b.Int64s(2)})
		outs = append(outs, ValueInfo{"present_key" + sfx, []int64{1, kv, d, slots}, dt}, ValueInfo{"present_value" + sfx, []int64{1, kv, slots, d}, dt})
	}
	gate := b.OpTo(pt("gate"), "Sigmoid", []string{b.OpTo(pt("gate_logits"), "MatMul", []string{h, w.g})})
	gated := b.Op("Mul", []string{attn, b.Reshape(gate, 1, kv, grp, 1)})
	return b.ReshapeTo(pt("attn_gated"), gated, 1, 1, heads*d), outs
}

// mlp emits the GEGLU MLP of normed input h and returns down_proj's output.
func (e *exporter) mlp(b *Builder, h string, w layerWeights, pt func(string) string) string {
	g := b.OpTo(pt("mlp_gate"), "MatMul", []string{h, w.gate})
	if e.o.GELU == "tanh" {
		g = b.GELUTanh(pt("mlp_gelu"), g)
	} else {
		g = b.GELUErf(pt("mlp_gelu"), g)
	}
	act := b.OpTo(pt("mlp_act"), "Mul", []string{g, b.OpTo(pt("mlp_up"), "MatMul", []string{h, w.up})})
	return b.OpTo(pt("mlp_out"), "MatMul", []string{act, w.down})
}

// LayerScope is the prefix of layer i's value names ("layers.3"): its
// points are LayerScope(i)+"/"+point ("layers.3/q_rope", "layers.3/mlp_act"),
// the interior values of a pattern sit under its result
// ("layers.3/attn_norm/Pow_0").
func LayerScope(i int) string { return fmt.Sprintf("layers.%d", i) }

// value records that the graph value name holds the forward's point of
// layer (ModelLevel for the model-level points) and returns name.
func (e *exporter) value(name string, layer int, point string) string {
	e.values = append(e.values, ValueName{Name: name, Layer: layer, Point: point})
	return name
}
