package qnn

import (
	"fmt"
	"sort"

	"sparkconv/onnxpb"
)

// The rules of LintEncodings (sparkconv lint GRAPH --encodings FILE).
var encodingRules = []Rule{
	{"encoding-unknown-tensor", Error, "an encoding names no tensor of the graph: QNN silently re-quantizes that tensor from its own inputs", "docs/qnn.md#ties-and-fused-patterns"},
	{"encoding-duplicate", Error, "two encodings for one tensor", "docs/qnn.md#encodings"},
	{"encoding-illegal", Error, "an encoding QAIRT or HTP refuses: dtype not INT, bit width, symmetry, offsets, scales", "docs/qnn.md#encodings, docs/qnn.md#encoding-grids"},
	{"encoding-param-kind", Error, "a parameter encoding on a tensor that is not a constant, or an activation encoding on a constant", "docs/qnn.md#encodings"},
	{"encoding-kv-tie", Error, "a KV input (past_*) and its new_*/present_* output, or a Concat's inputs and output, have different grids", "docs/qnn.md#ties-and-fused-patterns"},
	{"encoding-in-fused-pattern", Error, "an encoding inside a fusable RMSNorm or GELU pattern (or on its own constants): QNN cannot fuse it and runs the decomposed ops", "docs/qnn.md#device-figures: 8.5 % vs 1.0 % of a layer"},
	{"encoding-missing", Warning, "float activations with no encoding: QNN quantizes them with ranges of its own", "docs/qnn.md#ties-and-fused-patterns"},
}

// LintEncodings checks an AIMET encodings file against the graph it is for.
func LintEncodings(m *onnxpb.ModelProto, f *Encodings) []Finding {
	l := &linter{}
	if m == nil || m.GetGraph() == nil {
		l.model("no-graph", Error, "the model has no graph", "export a model with a graph")
		return l.out
	}
	l.x = newGraphIndex(m.GetGraph(), defaultOpset(m))
	x := l.x
	plan := NewEncodingPlan(m)
	patternConst := map[string]*Pattern{}
	for i := range plan.Patterns {
		for _, c := range plan.Patterns[i].Consts {
			patternConst[c] = &plan.Patterns[i]
		}
	}
	act := map[string]Encoding{}
	seen := map[string]bool{}
	check := func(e Encoding, param bool) {
		kind := map[bool]string{true: "parameter", false: "activation"}[param]
		if seen[e.Name] {
			l.tensor("encoding-duplicate", Error, e.Name, "a second "+kind+" encoding for this tensor", "keep one entry per tensor")
			return
		}
		seen[e.Name] = true
		_, isInit := x.inits[e.Name]
		_, produced := x.producer[e.Name]
		switch {
		case !isInit && !produced && !x.graphIn[e.Name]:
			l.tensor("encoding-unknown-tensor", Error, e.Name, "the "+kind+" encoding names no tensor of this graph; QNN ignores it and quantizes the tensor it meant with ranges of its own",
				"name the tensor as the graph does (sparkconv graphs: the manifest's values, e.g. layers.3/q_rope)")
			return
		case param && !isInit:
			l.tensor("encoding-param-kind", Error, e.Name, "a parameter encoding on a tensor computed at run time", "move it to activation_encodings")
		case !param && isInit:
			l.tensor("encoding-param-kind", Error, e.Name, "an activation encoding on a constant", "move it to param_encodings")
		}
		for _, p := range e.Problems(param) {
			l.tensor("encoding-illegal", Error, e.Name, p, "write dtype INT, bw 8 or 16 (4 for weights), symmetric per-channel weights with offset -2^(bw-1)")
		}
		if e.EncType == LPBQ && param && isInit {
			if msg := lpbqFits(e, x.inits[e.Name]); msg != "" {
				l.tensor("encoding-illegal", Error, e.Name, msg, "write LPBQ for a 2-D MatMul weight [in, out]: one scale per output channel, one integer scale per channel and block of block_size input rows")
			}
		}
		if pt := plan.Interior(e.Name); pt != nil {
			l.tensor("encoding-in-fused-pattern", Error, e.Name, fmt.Sprintf("inside the %s of %s (output %s)", pt.Kind, pt.Input, pt.Output),
				"encode only the pattern's input and output, so QNN fuses it into one op")
		} else if pt := patternConst[e.Name]; pt != nil {
			l.tensor("encoding-in-fused-pattern", Error, e.Name, fmt.Sprintf("a constant of the %s of %s", pt.Kind, pt.Input), "leave the pattern's own constants without encodings")
		}
		if !param {
			act[e.Name] = e
		}
	}
	for _, e := range f.Activations {
		check(e, false)
	}
	for _, e := range f.Params {
		check(e, true)
	}
	l.checkTies(act)
	var missing []string
	for _, a := range plan.Acts {
		if _, ok := act[a]; !ok {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		shown := missing
		if len(shown) > 5 {
			shown = shown[:5]
		}
		l.model("encoding-missing", Warning, fmt.Sprintf("%d float activations have no encoding (%v ...)", len(missing), shown),
			"give every activation an encoding (sparkconv qnn-bundle does), or accept QNN's own ranges for them")
	}
	return l.out
}

// checkTies requires the KV and Concat ties to hold.
func (l *linter) checkTies(act map[string]Encoding) {
	x := l.x
	for in := range x.graphIn {
		for _, pair := range [][2]string{{"past_key", "new_key"}, {"past_key", "present_key"}, {"past_value", "new_value"}, {"past_value", "present_value"}} {
			sfx, ok := cutPrefix(in, pair[0])
			out := pair[1] + sfx
			if !ok || !x.graphOut[out] {
				continue
			}
			a, ok1 := act[in]
			b, ok2 := act[out]
			if ok1 && ok2 && !a.Same(b) {
				l.tensor("encoding-kv-tie", Error, in, fmt.Sprintf("its grid differs from %s's: the runtime feeds %s back into %s without requantizing", out, out, in),
					"give the KV input and its output one encoding")
			}
		}
	}
	for i, n := range x.nodes {
		if !isOp(n, "Concat") {
			continue
		}
		o, ok := act[output(n, 0)]
		if !ok {
			continue
		}
		for _, in := range n.GetInput() {
			if e, ok := act[in]; ok && !e.Same(o) {
				l.node("encoding-kv-tie", Error, i, fmt.Sprintf("Concat input %s has another grid than the output %s", in, output(n, 0)),
					"tie Concat's inputs and output to one encoding (aimet op_types_to_tie_qtzrs)")
			}
		}
	}
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}

// lpbqFits says what is wrong with an LPBQ entry for the weight t, or "".
func lpbqFits(e Encoding, t *onnxpb.TensorProto) string {
	if len(t.GetDims()) != 2 {
		return fmt.Sprintf("LPBQ on a weight of dims %v (a MatMul weight [in, out] is 2-D)", t.GetDims())
	}
	return lpbqShape(e, int(t.GetDims()[0]), int(t.GetDims()[1]))
}
