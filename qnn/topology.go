package qnn

import (
	"fmt"
	"strings"
)

// checkTopology checks the graph is a graph (onnx.checker's check_graph,
// docs/qnn.md#what-onnxchecker-enforces): every value defined once, every node input defined by a
// graph input, an initializer or a node, no cycle, the nodes in
// topological order, every graph output produced. Each finding names the
// node that is wrong.
func (l *linter) checkTopology() {
	x := l.x
	defined := map[string]int{} // value -> defining node, -1 graph input or initializer
	for name := range x.inits {
		defined[name] = -1
	}
	for _, vi := range x.g.GetInput() {
		defined[vi.GetName()] = -1
	}
	for i, n := range x.nodes {
		for _, out := range n.GetOutput() {
			if out == "" {
				continue
			}
			prev, dup := defined[out]
			switch {
			case dup && prev < 0:
				l.node("value-redefined", Error, i, fmt.Sprintf("writes %s, which is a graph input or initializer", out), "give the node's output a name of its own")
			case dup:
				l.node("value-redefined", Error, i, fmt.Sprintf("writes %s, which node %s already writes", out, nodeLabel(x.nodes[prev], prev)), "give each value one producer (rename one of the outputs)")
			default:
				defined[out] = i
			}
		}
	}
	for i, n := range x.nodes {
		for _, in := range n.GetInput() {
			if _, ok := defined[in]; in != "" && !ok {
				l.node("input-undefined", Error, i, fmt.Sprintf("reads %s, which no graph input, initializer or node defines", in), "feed it as a graph input, add it as an initializer, or fix the name")
			}
		}
	}
	inCycle := l.cycles(defined)
	for i, n := range x.nodes {
		if inCycle[i] {
			continue
		}
		for _, in := range n.GetInput() {
			if p, ok := defined[in]; ok && p > i && !inCycle[p] {
				l.node("not-topological", Error, i, fmt.Sprintf("reads %s before node %s writes it", in, nodeLabel(x.nodes[p], p)), "sort the nodes topologically (every producer before its readers)")
				break
			}
		}
	}
	for _, vi := range x.g.GetOutput() {
		if _, ok := defined[vi.GetName()]; !ok {
			l.tensor("output-not-produced", Error, vi.GetName(), "the graph output is not produced by any node, nor is it a graph input or initializer", "produce it or drop it from the outputs")
		}
	}
}

// cycles finds the nodes on cycles (Kahn's algorithm leaves them) and
// reports each cycle once, naming its nodes in order.
func (l *linter) cycles(defined map[string]int) map[int]bool {
	x := l.x
	n := len(x.nodes)
	indeg := make([]int, n)
	readers := make([][]int, n)
	for i, nd := range x.nodes {
		for _, in := range nd.GetInput() {
			if p, ok := defined[in]; ok && p >= 0 {
				indeg[i]++
				readers[p] = append(readers[p], i)
			}
		}
	}
	queue := []int{}
	for i := range n {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, r := range readers[i] {
			if indeg[r]--; indeg[r] == 0 {
				queue = append(queue, r)
			}
		}
	}
	left := map[int]bool{}
	for i := range n {
		if indeg[i] > 0 {
			left[i] = true
		}
	}
	reported := map[int]bool{}
	for i := range n {
		if !left[i] || reported[i] {
			continue
		}
		// Walk producers inside the remaining set until a node repeats.
		path, at := []int{}, map[int]int{}
		cur := i
		for {
			if k, seen := at[cur]; seen {
				path = path[k:]
				break
			}
			at[cur] = len(path)
			path = append(path, cur)
			next := -1
			for _, in := range x.nodes[cur].GetInput() {
				if p, ok := defined[in]; ok && p >= 0 && left[p] {
					next = p
					break
				}
			}
			if next < 0 { // downstream of a cycle, not on one
				path = nil
				break
			}
			cur = next
		}
		if len(path) == 0 || reported[path[0]] {
			continue
		}
		// path follows producers; reversed it is the data flow. Start it at
		// the earliest node.
		flow := make([]int, len(path))
		for k := range path {
			flow[k] = path[len(path)-1-k]
		}
		start := 0
		for k := range flow {
			if flow[k] < flow[start] {
				start = k
			}
		}
		flow = append(flow[start:], flow[:start]...)
		var names []string
		for _, k := range flow {
			reported[k] = true
			names = append(names, nodeLabel(x.nodes[k], k))
		}
		names = append(names, names[0])
		first := flow[0]
		l.node("graph-cycle", Error, first, "is on a cycle: "+strings.Join(names, " -> "), "break the cycle: a decode-step graph feeds state back through its outputs, not through its own nodes")
	}
	return left
}
