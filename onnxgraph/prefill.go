package onnxgraph

import (
	"fmt"
	"math"
	"path/filepath"
	"reflect"

	"sparkconv/onnxio"
)

// This file is the export side of the prefill graphs
// (docs/formats.md#prefill-graphs): per embed, layer or block graph a
// second graph taking N tokens at once, built by the same code with e.n =
// N, and the weights file the two share.

// PrefillSuffix ends the name of a prefill graph: layer_03_prefill.onnx
// is the prefill graph of layer_03.onnx.
const PrefillSuffix = "_prefill"

// graphName is the name of the graph being built: base for the decode
// step, base + PrefillSuffix for a prefill graph.
func (e *exporter) graphName(base string) string {
	if e.n > 1 {
		return base + PrefillSuffix
	}
	return base
}

// addPair builds a graph with build and, with o.Prefill, builds it again as
// its prefill graph; the two are written sharing one weights file,
// "<graph>.data", which both manifest entries name as their external data.
// Without o.Prefill it is add.
func (e *exporter) addPair(man *Manifest, build func() (*Builder, GraphEntry, error)) error {
	if e.o.Prefill == 0 {
		return e.add(man, build)
	}
	if err := e.ctx.Err(); err != nil {
		return err
	}
	var bs []*Builder
	var gs []GraphEntry
	for _, n := range []int{1, e.o.Prefill} {
		e.n, e.values = n, nil
		b, g, err := build()
		e.n = 1
		if err != nil {
			return err
		}
		g.Values = e.values
		bs, gs = append(bs, b), append(gs, g)
	}
	gs[1].Decode = gs[0].Name
	data, infos, err := onnxio.WriteShared(filepath.Join(e.dir, gs[0].Name+".data"),
		[]string{filepath.Join(e.dir, gs[0].File), filepath.Join(e.dir, gs[1].File)},
		[]onnxio.Model{bs[0].Model(), bs[1].Model()}, e.o.Write)
	if err != nil {
		return err
	}
	e.m.ReleaseAll()
	for k := range gs {
		written(&gs[k], bs[k], infos[k])
	}
	man.Graphs = append(man.Graphs, gs[0])
	man.Prefill.Graphs = append(man.Prefill.Graphs, gs[1])
	if e.o.Done != nil {
		e.o.Done(gs[0].File, infos[0].Size+data.Size)
		e.o.Done(gs[1].File, infos[1].Size)
	}
	return nil
}

// prefillAttention is attention for e.n tokens at once. The rows of the
// query are kept in (token, head) order, so every tensor stays 4-D and
// every product a MatMul with equal batch dims: q [1,n,heads,d] ->
// [1,KV,n*grp,d] against keys [1,KV,d,C+n]; the scores are viewed as
// [KV,n,grp,C+n] for the mask [1,1,n,C+n] (seen as [1,n,1,C+n]) to
// broadcast over KV and the group. It returns the heads [1,n,heads*d]
// and new_key [1,KV,D,n] and new_value [1,KV,n,D], whatever the layer's
// layout: the runtime places the n entries in its cache.
func (e *exporter) prefillAttention(b *Builder, p layerPlan, sfx string, io layerIO, h string, w layerWeights, pt func(string) string) (string, []ValueInfo) {
	c, dt := e.c, e.o.DType
	kv, d, heads, n := int64(c.NumKVHeads), int64(c.HeadDim), int64(c.NumHeads), int64(e.n)
	grp, slots, half := heads/kv, int64(p.CacheSlots), int64(p.RotaryDims/2)
	cos := b.Reshape(io.cos, 1, n, 1, half)
	sin := b.Reshape(io.sin, 1, n, 1, half)
	q := b.Reshape(b.OpTo(pt("q"), "MatMul", []string{h, w.q}), 1, n, heads, d)
	q = b.RoPE(pt("q_rope"), q, cos, sin, half, d)
	q = b.OpTo(pt("q_scaled"), "Mul", []string{q, b.Scalar(1 / math.Sqrt(float64(d)))})
	k := b.Reshape(b.OpTo(pt("k"), "MatMul", []string{h, w.k}), 1, n, kv, d)
	k = b.RoPE(pt("k_rope"), k, cos, sin, half, d)
	v := b.Reshape(b.OpTo(pt("v"), "MatMul", []string{h, w.v}), 1, n, kv, d)
	kName, vName := "new_key"+sfx, "new_value"+sfx
	newK := b.OpTo(kName, "Transpose", []string{k}, AttrInts("perm", 0, 2, 3, 1)) // [1,kv,d,n]
	newV := b.OpTo(vName, "Transpose", []string{v}, AttrInts("perm", 0, 2, 1, 3)) // [1,kv,n,d]
	outs := []ValueInfo{{kName, []int64{1, kv, d, n}, dt}, {vName, []int64{1, kv, n, d}, dt}}
	keys := b.OpTo(pt("keys"), "Concat", []string{io.pastK, newK}, AttrInt("axis", 3))   // [1,kv,d,slots+n]
	vals := b.OpTo(pt("values"), "Concat", []string{io.pastV, newV}, AttrInt("axis", 2)) // [1,kv,slots+n,d]
	qt := b.Op("Transpose", []string{b.Reshape(q, 1, n, kv, grp*d)}, AttrInts("perm", 0, 2, 1, 3))
	scores := b.OpTo(pt("scores"), "MatMul", []string{b.Reshape(qt, 1, kv, n*grp, d), keys}) // [1,kv,n*grp,slots+n]
	masked := b.OpTo(pt("scores_masked"), "Add", []string{b.Reshape(scores, kv, n, grp, slots+n), b.Reshape(io.mask, 1, n, 1, slots+n)})
	probs := b.OpTo(pt("probs"), "Softmax", []string{masked}, AttrInt("axis", -1))
	attn := b.OpTo(pt("attn"), "MatMul", []string{b.Reshape(probs, 1, kv, n*grp, slots+n), vals})     // [1,kv,n*grp,d]
	at := b.Op("Transpose", []string{b.Reshape(attn, 1, kv, n, grp*d)}, AttrInts("perm", 0, 2, 1, 3)) // [1,n,kv,grp*d]
	gate := b.OpTo(pt("gate"), "Sigmoid", []string{b.OpTo(pt("gate_logits"), "MatMul", []string{h, w.g})})
	gated := b.Op("Mul", []string{b.Reshape(at, 1, n, heads, d), b.Reshape(gate, 1, n, heads, 1)})
	return b.ReshapeTo(pt("attn_gated"), gated, 1, n, heads*d), outs
}

// checkPrefill checks the manifest's "prefill" object: a token count
// below the context, and per prefill graph a valid entry (no head) whose
// "decode" names a decode graph of the same kind and layers. names holds
// the decode graphs' names; prefill names must differ from them.
func checkPrefill(m *Manifest, names map[string]bool) []error {
	p := m.Prefill
	if p == nil {
		return nil
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if p.Tokens < 1 || p.Tokens >= m.Context {
		bad("prefill.tokens = %d, want 1..%d (below the context)", p.Tokens, m.Context-1)
	}
	decode := map[string]*GraphEntry{}
	for i := range m.Graphs {
		decode[m.Graphs[i].Name] = &m.Graphs[i]
	}
	errs = append(errs, checkEntries("prefill.graphs", p.Graphs, m.DType, names)...)
	for i := range p.Graphs {
		g := &p.Graphs[i]
		d := decode[g.Decode]
		switch {
		case g.Kind == KindHead:
			bad("prefill.graphs[%d] (%s): a head has no prefill graph", i, g.File)
		case d == nil:
			bad("prefill.graphs[%d] (%s): decode %q names no graph of the export", i, g.File, g.Decode)
		case d.Kind != g.Kind || !reflect.DeepEqual(d.LayerInfos(), g.LayerInfos()):
			bad("prefill.graphs[%d] (%s): kind %s and layers %v differ from its decode graph %s (%s, %v)", i, g.File, g.Kind, g.LayerInfos(), d.Name, d.Kind, d.LayerInfos())
		}
	}
	return errs
}

// PrefillOf returns the prefill graph of each decode graph, by the decode
// graph's name (empty without prefill graphs).
func PrefillOf(m *Manifest) map[string]GraphEntry {
	out := map[string]GraphEntry{}
	if m.Prefill != nil {
		for _, g := range m.Prefill.Graphs {
			out[g.Decode] = g
		}
	}
	return out
}
