package qnnbundle

import (
	"math"
	"slices"
	"strings"
	"testing"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
)

// TestStreamEqualsWholeTrace holds the layer-at-a-time stream to the
// whole-model trace: every graph's samples (decode and prefill, layer and
// block graphs, the head's logits) are bit for bit the same, sequence by
// sequence, and the stream refuses a graph that comes before where it
// stands.
func TestStreamEqualsWholeTrace(t *testing.T) {
	model := exporttest.Golden("spark-mini-tied")
	ref, err := forward.Open(model, forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for _, gran := range []string{"layer", "block"} {
		t.Run(gran, func(t *testing.T) {
			export := exporttest.Export(t, model, onnxgraph.ExportOptions{Context: 24, Prefill: 4, Granularity: gran})
			man, err := onnxgraph.ReadManifest(export)
			if err != nil {
				t.Fatal(err)
			}
			var ids, held [][]int
			for s, n := range []int{24, 13, 1} {
				seq := make([]int, n)
				for i := range seq {
					seq[i] = (i*(31+s) + 7*s + 3) % ref.Cfg.VocabSize
				}
				ids, held = append(ids, seq), append(held, slices.Compact([]int{0, n / 2, n - 1}))
			}
			whole := make([]*Trace, len(ids))
			for i := range ids {
				if whole[i], err = NewTrace(ref, man, ids[i], held[i]); err != nil {
					t.Fatal(err)
				}
			}
			st, err := NewStream(ref, man, ids, held, nil)
			if err != nil {
				t.Fatal(err)
			}
			pre := onnxgraph.PrefillOf(man)
			var order []onnxgraph.GraphEntry
			for _, e := range onnxgraph.GraphOrder(man) {
				order = append(order, e)
				if pg, ok := pre[e.Name]; ok {
					order = append(order, pg)
				}
			}
			for _, e := range order {
				ts, err := st.Traces(e)
				if err != nil {
					t.Fatal(err)
				}
				for i := range ids {
					at := held[i]
					if e.Decode != "" {
						at = nil
						for p := 0; p+4 <= len(ids[i]); p += 4 {
							at = append(at, p)
						}
					}
					want, err := whole[i].Collect(e, at, true)
					if err != nil {
						t.Fatal(err)
					}
					got, err := ts[i].Collect(e, at, true)
					if err != nil {
						t.Fatalf("%s, sequence %d: %v", e.Name, i, err)
					}
					sameSamples(t, e.Name, got, want)
				}
			}
			if _, err := whole[0].Collect(order[2], []int{2, 2}, false); err == nil || !strings.Contains(err.Error(), "not strictly ascending") {
				t.Errorf("a position twice: %v", err)
			}
			if _, err := st.Traces(order[1]); err == nil || !strings.Contains(err.Error(), "the stream stands at layer") {
				t.Errorf("a graph after the head: %v", err)
			}
		})
	}
}

func sameSamples(t *testing.T, graph string, got, want []Sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d samples, want %d", graph, len(got), len(want))
	}
	same := func(a, b []float32) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				return false
			}
		}
		return true
	}
	for k := range got {
		for name, v := range want[k].Feeds {
			g := got[k].Feeds[name]
			if !same(g.F32, v.F32) || len(g.I64) != len(v.I64) {
				t.Fatalf("%s position %d: feed %s differs", graph, got[k].Pos, name)
			}
		}
		for name, v := range want[k].Want {
			if !same(got[k].Want[name], v) {
				t.Fatalf("%s position %d: reference %s differs", graph, got[k].Pos, name)
			}
		}
		if len(got[k].Feeds) != len(want[k].Feeds) || len(got[k].Want) != len(want[k].Want) {
			t.Fatalf("%s position %d: %d feeds, %d outputs; want %d, %d", graph, got[k].Pos,
				len(got[k].Feeds), len(got[k].Want), len(want[k].Feeds), len(want[k].Want))
		}
	}
}

// TestStreamRefuses names the sequence and the numbers.
func TestStreamRefuses(t *testing.T) {
	model := exporttest.Golden("spark-mini-tied")
	ref, err := forward.Open(model, forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	export := exporttest.Export(t, model, onnxgraph.ExportOptions{Context: 24})
	man, err := onnxgraph.ReadManifest(export)
	if err != nil {
		t.Fatal(err)
	}
	label := func(i int) string { return []string{"first", "second"}[i] }
	for _, c := range []struct {
		ids, held [][]int
		want      string
	}{
		{[][]int{{1, 2}, make([]int, 25)}, nil, "second: 25 tokens: want 1..24 (the export's context)"},
		{[][]int{{1, 2}, {}}, nil, "second: 0 tokens"},
		{[][]int{{1, 2}}, [][]int{{2}}, "first: held-out position 2 outside the 2 tokens"},
		{[][]int{{1, 1 << 30}}, nil, "first: position 1: token id 1073741824 out of range"},
	} {
		if _, err := NewStream(ref, man, c.ids, c.held, label); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.ids, err, c.want)
		}
	}
}
