package qnn

import (
	"fmt"
	"math"
	"strings"

	"sparkconv/onnxpb"
)

// Precision is a QNN quantization recipe: weight and activation bit widths,
// and the tensors a mixed recipe keeps at other widths
// (EncodingPlan.ParamBits, EncodingPlan.KVGroups).
type Precision struct {
	Name                string
	WeightBits, ActBits int
	// HeadBits are the bits of the head's weights (the MatMul that writes
	// the logits), KVBits those of the KV cache's tie groups (symmetric
	// grids), EmbedBits those of the embedding table; 0: WeightBits, ActBits
	// and WeightBits.
	HeadBits, KVBits, EmbedBits int
	// Search chooses each MatMul weight's per-channel scales by the
	// calibration activations' output error (SearchScales) instead of the
	// channel's absolute maximum.
	Search bool
	// Block, when not 0, gives the searched MatMul weights LPBQ grids in
	// blocks of Block input rows (SearchBlocks: 4-bit codes, an integer
	// scale per block under a float scale per output channel) in place of
	// per-channel ones.
	Block int
	// Solve chooses the codes of the LPBQ weights on their grid by GPTQ's
	// solve (SolveBlocks) instead of rounding to nearest; the bundle's
	// graphs then hold the solved weights, on the grid. w4a16-lpbq sets
	// it: on the real model, with H over the calibration sequences' rows
	// too, it took the held-out mean KLD from 0.335 to 0.222
	// (docs/qnn.md#w4a16-lpbq).
	Solve bool
}

// Precisions are the recipes qnn-bundle writes (qai-hub-models' Precision
// names, docs/qnn.md#the-way-to-the-phone). w4a16 is qai-hub-models' LLM
// recipe: 4-bit weights per output channel, 16-bit activations, the head's
// weights and the KV cache at 8 bits, the embedding table at 16
// (docs/qnn.md#w4a16). w4a16-lpbq is the same recipe with the layers'
// 4-bit weights in LPBQ blocks of 64 input rows, as qai-hub-models'
// _set_4bit_weights_to_lpbq sets them, their codes solved by GPTQ on that
// grid (docs/qnn.md#w4a16-lpbq).
var Precisions = []Precision{
	{Name: "w8a16", WeightBits: 8, ActBits: 16},
	{Name: "w16a16", WeightBits: 16, ActBits: 16},
	{Name: "w8a8", WeightBits: 8, ActBits: 8},
	{Name: "w4a16", WeightBits: 4, ActBits: 16, HeadBits: 8, KVBits: 8, EmbedBits: 16, Search: true},
	{Name: "w4a16-lpbq", WeightBits: 4, ActBits: 16, HeadBits: 8, KVBits: 8, EmbedBits: 16, Search: true, Block: LPBQBlock, Solve: true},
}

// PromotedBits are the weight bits of a graph promoted out of a 4-bit
// recipe (Promoted).
const PromotedBits = 8

// Promotes reports whether p has weights a graph can be promoted out of:
// fewer than PromotedBits.
func (p Precision) Promotes() bool { return p.WeightBits < PromotedBits }

// Promoted is the recipe a graph of p is rebuilt at when its 4-bit
// weights cost it too much (qnn-bundle --promote-below): p with its
// weights at PromotedBits per output channel, still searched, no blocks
// and no solve; the head, the KV cache, the embedding table and the
// activations keep p's widths. ExecuTorch's LLM quantization guide
// promotes a layer to higher precision by its per-layer SQNR the same way.
func (p Precision) Promoted() Precision {
	q := p
	q.WeightBits, q.Block, q.Solve = PromotedBits, 0, false
	return q
}

// ParsePrecision returns the named recipe.
func ParsePrecision(s string) (Precision, error) {
	var names []string
	for _, p := range Precisions {
		if p.Name == s {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Precision{}, fmt.Errorf("precision %q: want one of %s", s, strings.Join(names, ", "))
}

// MaskClip is the low end of the attention mask's encoding: qai-hub-models'
// attention_mask_min_clip for 16-bit activations (docs/qnn.md#the-attention-mask). The
// runtime's mask_value (-1e4) saturates to it at the input quantizer;
// exp(-50) ~ 2e-22, so a masked slot stays hidden, while a grid over
// [mask_value, 0] would spend the 16 bits on a range no real score uses.
const MaskClip = -50.0

// Pattern is a fusable op pattern (RMSNorm, exact GELU) found in a graph:
// QNN fuses it into one op only when no encoding sits on its interior.
type Pattern struct {
	Kind     string   // "RMSNorm" or "GELU"
	Input    string   // the pattern's input
	Output   string   // its result
	Interior []string // values between input and output
	Consts   []string // the pattern's own constants (2, eps, sqrt 2, 1, 0.5)
}

// Param is a constant that gets a parameter encoding.
type Param struct {
	Name string
	// Axis is the per-channel axis (the output-channel axis of a MatMul
	// weight [in, out]: 1), or -1 for one encoding over the tensor.
	Axis int
}

// EncodingPlan says where a graph gets encodings, the way the QAIRT converter
// quantizes it: every float activation (graph inputs and node outputs)
// except the interiors of fusable patterns, with tied tensors sharing one
// encoding (data movement ops and Concat with their inputs, each KV input
// with its new_*/present_* output, a Gather's output with its table), and
// the float constants as parameters (MatMul weights per output channel,
// others per tensor, none for a pattern's own constants).
type EncodingPlan struct {
	Acts     []string // in graph order
	Params   []Param
	Patterns []Pattern
	// GatherOf maps a Gather output to the table whose encoding it takes.
	GatherOf map[string]string
	group    map[string]string // tensor -> group representative
	interior map[string]*Pattern
	acts     map[string]bool
	// bounded are the tensors whose range is fixed by what computes them
	// (Softmax and Sigmoid outputs, the rope tables): no headroom.
	bounded map[string]bool
	// head are the MatMul weights whose product is a graph output (the
	// head's logits).
	head map[string]bool
	// Wider gives some 16-bit activations a headroom of their own in
	// place of Encodings' (a tie group takes the largest of its
	// members'): the key is a tensor's name or the last part of it after
	// a "/" ("mlp_act" is every layer's layers.N/mlp_act).
	Wider map[string]float64
}

// headroomOf is the headroom of tensor a: Wider's by its name or its last
// part, else h.
func (p *EncodingPlan) headroomOf(a string, h float64) float64 {
	if w, ok := p.Wider[a]; ok {
		return w
	}
	if i := strings.LastIndexByte(a, '/'); i >= 0 {
		if w, ok := p.Wider[a[i+1:]]; ok {
			return w
		}
	}
	return h
}

// NewEncodingPlan plans a graph's encodings.
func NewEncodingPlan(m *onnxpb.ModelProto) *EncodingPlan {
	x := newGraphIndex(m.GetGraph(), defaultOpset(m))
	p := &EncodingPlan{GatherOf: map[string]string{}, group: map[string]string{}, interior: map[string]*Pattern{}, bounded: map[string]bool{}, head: map[string]bool{}}
	p.Patterns = x.fusablePatterns()
	patternConst := map[string]bool{}
	for i := range p.Patterns {
		pt := &p.Patterns[i]
		for _, v := range pt.Interior {
			p.interior[v] = pt
		}
		for _, c := range pt.Consts {
			patternConst[c] = true
		}
	}
	isFloat := func(name string) bool {
		e, ok := x.elem[name]
		return !ok || e == int32(onnxpb.TensorProto_FLOAT) || e == int32(onnxpb.TensorProto_FLOAT16)
	}
	seen := map[string]bool{}
	addAct := func(name string) {
		if name != "" && !seen[name] && isFloat(name) && p.interior[name] == nil {
			seen[name] = true
			p.Acts = append(p.Acts, name)
		}
	}
	for _, vi := range x.g.GetInput() {
		et := vi.GetType().GetTensorType().GetElemType()
		if x.graphIn[vi.GetName()] && (et == int32(onnxpb.TensorProto_FLOAT) || et == int32(onnxpb.TensorProto_FLOAT16)) {
			addAct(vi.GetName())
			if strings.HasPrefix(vi.GetName(), "rope_") {
				p.bounded[vi.GetName()] = true
			}
		}
	}
	params := map[string]int{}
	var order []string
	for _, n := range x.nodes {
		for slot, in := range n.GetInput() {
			t, ok := x.inits[in]
			if !ok || patternConst[in] || t.GetDataType() != int32(onnxpb.TensorProto_FLOAT) {
				continue
			}
			axis := -1
			if isOp(n, "MatMul") && slot == 1 && len(t.Dims) == 2 {
				axis = 1
				if x.graphOut[output(n, 0)] {
					p.head[in] = true
				}
			}
			if old, dup := params[in]; !dup {
				order = append(order, in)
				params[in] = axis
			} else if old != axis {
				params[in] = -1
			}
		}
		for _, out := range n.GetOutput() {
			addAct(out)
		}
		switch n.GetOpType() {
		case "Softmax", "Sigmoid":
			p.bounded[output(n, 0)] = true
		case "Concat":
			for _, in := range n.GetInput() {
				p.union(in, output(n, 0))
			}
		case "Reshape", "Split", "Slice", "Identity", "Squeeze", "Unsqueeze", "Transpose":
			for _, out := range n.GetOutput() {
				p.union(input(n, 0), out)
			}
		case "Gather":
			if _, ok := x.inits[input(n, 0)]; ok {
				p.GatherOf[output(n, 0)] = input(n, 0)
			}
		}
	}
	for _, name := range order {
		p.Params = append(p.Params, Param{Name: name, Axis: params[name]})
	}
	for in := range x.graphIn {
		for _, pair := range [][2]string{{"past_key", "new_key"}, {"past_key", "present_key"}, {"past_value", "new_value"}, {"past_value", "present_value"}} {
			if sfx, ok := strings.CutPrefix(in, pair[0]); ok && x.graphOut[pair[1]+sfx] {
				p.union(in, pair[1]+sfx)
			}
		}
	}
	return p
}

func (p *EncodingPlan) find(t string) string {
	for {
		r, ok := p.group[t]
		if !ok || r == t {
			return t
		}
		t = r
	}
}

func (p *EncodingPlan) union(a, b string) {
	if a == "" || b == "" {
		return
	}
	ra, rb := p.find(a), p.find(b)
	if ra == rb {
		return
	}
	if rb < ra { // deterministic representative: the smaller name
		ra, rb = rb, ra
	}
	p.group[rb] = ra
	p.group[ra] = ra
}

// Group names the group of tied tensors t belongs to (its
// representative): tensors of one group share one encoding.
func (p *EncodingPlan) Group(t string) string { return p.find(t) }

// ActSet is the set of Acts.
func (p *EncodingPlan) ActSet() map[string]bool {
	if p.acts == nil {
		p.acts = map[string]bool{}
		for _, a := range p.Acts {
			p.acts[a] = true
		}
	}
	return p.acts
}

// Interior returns the fusable pattern whose interior holds t, or nil.
func (p *EncodingPlan) Interior(t string) *Pattern { return p.interior[t] }

// fusablePatterns finds every RMSNorm and exact-GELU pattern QNN fuses.
func (x *graphIndex) fusablePatterns() []Pattern {
	var out []Pattern
	for _, n := range x.nodes {
		switch n.GetOpType() {
		case "ReduceMean":
			if pt, ok := x.rmsPattern(n); ok {
				out = append(out, pt)
			}
		case "Erf":
			if pt, ok := x.geluPattern(n); ok {
				out = append(out, pt)
			}
		}
	}
	return out
}

// rmsPattern matches Pow(x, 2) -> ReduceMean -> Add(eps) -> Sqrt ->
// Div(x, .) -> Mul(weight) around ReduceMean r (the contract's form, the
// one the converter's match_rms_norm fuses).
func (x *graphIndex) rmsPattern(r *onnxpb.NodeProto) (Pattern, bool) {
	sq := x.prod(input(r, 0))
	if !isOp(sq, "Pow") || !x.scalarNear(input(sq, 1), 2, 0) || x.soleReader(output(sq, 0)) != r {
		return Pattern{}, false
	}
	base := input(sq, 0)
	for _, d := range x.rmsAxes(r, base) {
		if d.fatal {
			return Pattern{}, false
		}
	}
	add := x.soleReader(output(r, 0))
	eps, ok := otherInput(add, output(r, 0))
	if !isOp(add, "Add") || !ok || !x.isConst(eps) {
		return Pattern{}, false
	}
	sqrt := x.soleReader(output(add, 0))
	if !isOp(sqrt, "Sqrt") {
		return Pattern{}, false
	}
	div := x.soleReader(output(sqrt, 0))
	if !isOp(div, "Div") || input(div, 0) != base || input(div, 1) != output(sqrt, 0) {
		return Pattern{}, false
	}
	mul := x.soleReader(output(div, 0))
	if w, ok := otherInput(mul, output(div, 0)); !isOp(mul, "Mul") || !ok || !x.isConst(w) {
		return Pattern{}, false
	}
	return Pattern{Kind: "RMSNorm", Input: base, Output: output(mul, 0),
		Interior: []string{output(sq, 0), output(r, 0), output(add, 0), output(sqrt, 0), output(div, 0)},
		Consts:   []string{input(sq, 1), eps}}, true
}

// geluPattern matches Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5)
// around Erf e (the form both the converter and ORT's QNN EP fuse).
func (x *graphIndex) geluPattern(e *onnxpb.NodeProto) (Pattern, bool) {
	if v, _ := x.matchGELU(e); v != "div" {
		return Pattern{}, false
	}
	d := x.prod(input(e, 0))
	a := x.soleReader(output(e, 0))
	m := x.soleReader(output(a, 0))
	m2 := x.soleReader(output(m, 0))
	if !isOp(m2, "Mul") {
		return Pattern{}, false // the (0.5 * x) * (1 + erf) form: not the contract's
	}
	one, _ := otherInput(a, output(e, 0))
	half, _ := otherInput(m2, output(m, 0))
	return Pattern{Kind: "GELU", Input: input(d, 0), Output: output(m2, 0),
		Interior: []string{output(d, 0), output(e, 0), output(a, 0), output(m, 0)},
		Consts:   []string{input(d, 1), one, half}}, true
}

// Ranges accumulates the observed [min, max] of activations.
type Ranges map[string][2]float64

// Observe widens the range of name by data.
func (r Ranges) Observe(name string, data []float32) {
	lo, hi := math.Inf(1), math.Inf(-1)
	if old, ok := r[name]; ok {
		lo, hi = old[0], old[1]
	}
	if len(data) > 0 {
		dlo, dhi := minMax(data)
		lo, hi = math.Min(lo, float64(dlo)), math.Max(hi, float64(dhi))
	}
	r[name] = [2]float64{lo, hi}
}

// minMax is data's least and greatest value (NaN when data holds one, as
// math.Min and math.Max give), over four lanes: calibration observes every
// activation of every graph run, and math.Min's sign-of-zero and NaN
// branches per value cost more than the graph's arithmetic.
func minMax(data []float32) (lo, hi float32) {
	var l, h [4]float32
	for k := range l {
		l[k], h[k] = data[0], data[0]
	}
	nan := false
	i := 0
	for ; i+4 <= len(data); i += 4 {
		for k := range 4 {
			v := data[i+k]
			if v < l[k] {
				l[k] = v
			}
			if v > h[k] {
				h[k] = v
			}
			nan = nan || v != v
		}
	}
	for ; i < len(data); i++ {
		v := data[i]
		l[0], h[0] = min(l[0], v), max(h[0], v)
		nan = nan || v != v
	}
	lo, hi = min(l[0], l[1], l[2], l[3]), max(h[0], h[1], h[2], h[3])
	if nan {
		return float32(math.NaN()), float32(math.NaN())
	}
	return lo, hi
}

// ParamAbsMax returns a constant's absolute maxima: per column of a
// [rows, cols] tensor with axis 1, else one over the tensor.
func ParamAbsMax(data []float32, dims []int64, axis int) []float64 {
	if axis == 1 && len(dims) == 2 {
		cols := int(dims[1])
		out := make([]float64, cols)
		for i, v := range data {
			c := i % cols
			out[c] = math.Max(out[c], math.Abs(float64(v)))
		}
		return out
	}
	var m float64
	for _, v := range data {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return []float64{m}
}

// Encodings turns observed ranges and the constants' absolute maxima into
// the graph's encodings file: each tie group's activations share one
// asymmetric grid over the union of their ranges, fixed ranges (the
// attention mask) override what was observed, parameters get symmetric
// grids, and a Gather's output takes its table's grid.
//
// With 16-bit activations and headroom h > 1, every group's observed
// range [lo, hi] becomes [h*lo, h*hi], except groups holding a fixed or a
// bounded tensor (Softmax and Sigmoid outputs, the rope tables). Text the
// calibration never saw drives some tensors past their observed range (on
// the real model the down_proj input of a layer reached 2.4x it), and a
// value past the range saturates; a 16-bit grid has the resolution to
// spare (h = 2 costs 6 dB of a grid whose own SNR is about 90 dB). 8-bit
// grids keep the observed range: they have no resolution to spare.
//
// Each parameter gets ParamBits' width; with prec.KVBits the KV cache's
// groups (KVGroups) get symmetric KVBits grids over their observed
// absolute maximum.
func (p *EncodingPlan) Encodings(prec Precision, r Ranges, fixed Ranges, absmax map[string][]float64, headroom float64) (*Encodings, error) {
	f := &Encodings{Version: EncodingsVersion, Activations: []Encoding{}, Params: []Encoding{}, ExcludedLayers: []string{},
		QuantizerArgs: &QuantizerArgs{ActivationBitwidth: prec.ActBits, DType: "int", IsSymmetric: false,
			ParamBitwidth: prec.WeightBits, PerChannel: true, QuantScheme: "min_max"}}
	paramEnc := map[string]Encoding{}
	kv := p.kvGroups(prec)
	for _, pr := range p.Params {
		am, ok := absmax[pr.Name]
		if !ok {
			return nil, fmt.Errorf("parameter %s: no values", pr.Name)
		}
		e := SymmetricEncoding(pr.Name, p.ParamBits(prec, pr), am)
		paramEnc[pr.Name] = e
		f.Params = append(f.Params, e)
	}
	group := map[string][2]float64{}
	for _, a := range p.Acts {
		rng, ok := fixed[a]
		if !ok {
			if rng, ok = r[a]; !ok {
				return nil, fmt.Errorf("activation %s: no range observed (was it computed on the calibration inputs?)", a)
			}
		}
		g := p.find(a)
		if old, ok := group[g]; ok {
			if _, isFixed := fixed[a]; !isFixed {
				rng = [2]float64{math.Min(old[0], rng[0]), math.Max(old[1], rng[1])}
			} else {
				rng = old
			}
		}
		group[g] = rng
	}
	policy := map[string]RangePolicy{} // per group
	for g := range group {
		policy[g] = PolicyMinMax
	}
	if prec.ActBits == 16 {
		keep := map[string]RangePolicy{}
		for a := range p.bounded {
			keep[p.find(a)] = PolicyBounded
		}
		for g := range kv {
			keep[g] = PolicyKV // an 8-bit grid has no resolution to spare
		}
		h := map[string]float64{}
		wider := map[string]bool{}
		for _, a := range p.Acts {
			g := p.find(a)
			ha := p.headroomOf(a, headroom)
			if ha > h[g] {
				h[g], wider[g] = ha, ha != headroom
			}
		}
		for g, rng := range group {
			switch {
			case keep[g] != "":
				policy[g] = keep[g]
			case h[g] > 1:
				group[g] = [2]float64{h[g] * rng[0], h[g] * rng[1]}
				policy[g] = PolicyHeadroom.times(h[g])
				if wider[g] {
					policy[g] = PolicyTensorHeadroom.times(h[g])
				}
			}
		}
	}
	for g := range kv {
		policy[g] = PolicyKV
	}
	// A fixed range decides its whole group.
	for a, rng := range fixed {
		group[p.find(a)], policy[p.find(a)] = rng, PolicyFixed
	}
	f.Policy = map[string]RangePolicy{}
	for _, a := range p.Acts {
		if table, ok := p.GatherOf[a]; ok {
			f.Activations = append(f.Activations, paramEnc[table].Renamed(a))
			f.Policy[a] = PolicyTable
			continue
		}
		f.Policy[a] = policy[p.find(a)]
		rng := group[p.find(a)]
		if math.IsInf(rng[0], 0) || math.IsInf(rng[1], 0) || math.IsNaN(rng[0]) || math.IsNaN(rng[1]) {
			return nil, fmt.Errorf("activation %s: range [%v, %v] is not finite", a, rng[0], rng[1])
		}
		if kv[p.find(a)] {
			f.Activations = append(f.Activations, SymmetricEncoding(a, prec.KVBits, []float64{math.Max(-rng[0], rng[1])}))
			continue
		}
		f.Activations = append(f.Activations, AsymmetricEncoding(a, prec.ActBits, rng[0], rng[1]))
	}
	return f, nil
}

// RangePolicy is how Encodings chose an activation's range (a tie group's
// members share their group's): its name, and "xH" for a headroom H.
type RangePolicy string

// The range policies; Why explains each.
const (
	// PolicyMinMax: the observed min-max, as it is (8-bit activations).
	PolicyMinMax RangePolicy = "min-max"
	// PolicyHeadroom: the observed min-max widened by the headroom.
	PolicyHeadroom RangePolicy = "min-max x"
	// PolicyTensorHeadroom: widened by the tensor's own headroom (Wider).
	PolicyTensorHeadroom RangePolicy = "min-max, own headroom x"
	// PolicyBounded: the observed min-max of a bounded op's output.
	PolicyBounded RangePolicy = "min-max, bounded"
	// PolicyKV: a symmetric KV-cache grid over the observed absolute max.
	PolicyKV RangePolicy = "kv absmax"
	// PolicyFixed: a range given rather than observed (the attention mask).
	PolicyFixed RangePolicy = "fixed"
	// PolicyTable: a Gather output takes its table's (parameter) encoding.
	PolicyTable RangePolicy = "table"
	// PolicyDecodeTie: a prefill graph's tensor takes its decode graph's
	// encoding (qnnbundle's PrefillTies).
	PolicyDecodeTie RangePolicy = "decode graph's"
)

func (r RangePolicy) times(h float64) RangePolicy {
	return RangePolicy(fmt.Sprintf("%s%g", r, h))
}

// Why is the reason for the policy, in a sentence.
func (r RangePolicy) Why() string {
	s := string(r)
	switch {
	case r == PolicyMinMax:
		return "the observed range as it is: an 8-bit grid has no resolution to spare (a 16-bit one at --headroom 1)"
	case r == PolicyBounded:
		return "the op bounds its output (Softmax, Sigmoid, the rope tables): no value can pass the observed range"
	case r == PolicyKV:
		return "the KV cache's 8-bit symmetric grid over the observed absolute maximum: an 8-bit grid has no resolution to spare"
	case r == PolicyFixed:
		return "given, not observed: the attention mask, whose empty slots saturate at the low end on purpose"
	case r == PolicyDecodeTie:
		return "a prefill graph shares the tensor with its decode graph (the KV cache, the residual): one encoding for both"
	case r == PolicyTable:
		return "a Gather output holds the table's values: it takes the table's encoding"
	case strings.HasPrefix(s, string(PolicyTensorHeadroom)):
		return "the tensor's own headroom (--headroom-tensor): text the calibration never saw drives it farthest past its observed range"
	case strings.HasPrefix(s, string(PolicyHeadroom)):
		return "the observed range widened by --headroom: room for text the calibration never saw, from a 16-bit grid's spare resolution"
	}
	return ""
}

// Headroom is qnn-bundle's default widening of 16-bit activation ranges
// (Plan.Encodings).
const Headroom = 2.0

// HeadroomTensors are qnn-bundle's default per-tensor headrooms
// (EncodingPlan.Wider), unless --headroom or --headroom-tensor is given:
// each layer's down_proj input (the gated MLP's product, mlp_act) is what
// text the calibration never saw drives farthest past its observed range
// (on the real model, to 4.3x the range one stream of calibration text
// observed, and to 2.0x the range of qnn-bundle's 64 calibration
// sequences, where no other tensor goes past its range at all), so it
// alone gets 8: 12 dB of a 16-bit grid's resolution, where the others
// keep Headroom's 6 (docs/qnn.md#ranges-that-hold-on-unseen-text).
var HeadroomTensors = map[string]float64{"mlp_act": 8}
