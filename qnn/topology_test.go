package qnn

import (
	"strings"
	"testing"
)

func topologyCases() []lintCase {
	graph := func(edit func(b *tb, x string)) func() *tb {
		return func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 1, 4)
			edit(b, x)
			return b
		}
	}
	twoProducers := graph(func(b *tb, x string) {
		b.opTo("y", "Neg", []string{x})
		b.opTo("y", "Abs", []string{x})
		b.out("y", tF32, 1, 4)
	})
	writesInput := graph(func(b *tb, x string) {
		b.opTo("x", "Neg", []string{x})
		b.opTo("y", "Abs", []string{x})
		b.out("y", tF32, 1, 4)
	})
	undefined := graph(func(b *tb, x string) {
		b.opTo("y", "Add", []string{x, "ghost"})
		b.out("y", tF32, 1, 4)
	})
	cycle := graph(func(b *tb, x string) {
		b.opTo("a", "Add", []string{x, "c"})
		b.opTo("b", "Neg", []string{"a"})
		b.opTo("c", "Abs", []string{"b"})
		b.opTo("y", "Neg", []string{"c"})
		b.out("y", tF32, 1, 4)
	})
	unsorted := graph(func(b *tb, x string) {
		b.opTo("y", "Neg", []string{"t"})
		b.opTo("t", "Abs", []string{x})
		b.out("y", tF32, 1, 4)
	})
	noOutput := graph(func(b *tb, x string) {
		b.opTo("y", "Neg", []string{x})
		b.out("y", tF32, 1, 4)
		b.out("nothing", tF32, 1, 4)
	})
	clean := func() *tb { return cleanLayer() }
	return []lintCase{
		{"two producers", twoProducers, "value-redefined", Error, 1},
		{"node writes a graph input", writesInput, "value-redefined", Error, 1},
		{"one producer each", clean, "value-redefined", "", 0},
		{"undefined input", undefined, "input-undefined", Error, 1},
		{"inputs defined", clean, "input-undefined", "", 0},
		{"cycle", cycle, "graph-cycle", Error, 1},
		{"cycle is not also unsorted", cycle, "not-topological", "", 0},
		{"no cycle", clean, "graph-cycle", "", 0},
		{"unsorted", unsorted, "not-topological", Error, 1},
		{"sorted", clean, "not-topological", "", 0},
		{"output not produced", noOutput, "output-not-produced", Error, 1},
		{"outputs produced", clean, "output-not-produced", "", 0},
	}
}

// TestTopologyNamesTheNode: each finding says which node is wrong, and
// the cycle finding lists the cycle; Sanitize on such graphs terminates and
// reports them through its lint.
func TestTopologyNamesTheNode(t *testing.T) {
	for _, c := range topologyCases() {
		if c.n == 0 {
			continue
		}
		m := c.build().m
		fs := findings(Lint(m), c.rule)
		if len(fs) == 0 {
			t.Fatalf("%s: no finding", c.name)
		}
		f := fs[0]
		if c.rule != "output-not-produced" && (f.Node == "" || f.NodeIndex < 0) {
			t.Errorf("%s: finding names no node: %+v", c.name, f)
		}
		if c.rule == "graph-cycle" && !strings.Contains(f.Message, "n0_Add -> n1_Neg -> n2_Abs -> n0_Add") {
			t.Errorf("cycle message %q", f.Message)
		}
		if _, err := Sanitize(m); err == nil {
			if e, _ := Count(Lint(m)); e == 0 {
				t.Errorf("%s: after Sanitize the lint finds no error", c.name)
			}
		}
	}
}
