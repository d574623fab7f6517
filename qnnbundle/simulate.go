package qnnbundle

import (
	"fmt"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/ortrun"
	"sparkconv/quant"
)

// SimResult is one QDQ graph's agreement with the float32 reference on the
// held-out samples.
type SimResult struct {
	// SNR is of hidden_out (embed, layer, block) or logits (head).
	SNR float64
	// Delta is the SNR of the residual delta hidden_out - hidden_in: the
	// layer's own contribution, which the residual's SNR flatters.
	Delta *float64
	// Top1 is the head's share of held-out positions whose arg-max logit
	// matches the reference's.
	Top1 *float64
}

// SimOptimize is the ONNX Runtime optimization level of the simulation:
// "basic" folds constants (the weights' DequantizeLinear) but leaves every
// activation's Q/DQ pair in place, so ORT computes in float between
// quantizers (fake quantization) instead of fusing them into its own
// integer kernels.
const SimOptimize = "basic"

// Simulate runs the QDQ graph at path (a graph of the bundle's qdq/
// folder) in ONNX Runtime on the held-out samples and compares it with the
// reference outputs captured beside them.
func Simulate(path string, e onnxgraph.GraphEntry, held []Sample, threads int) (SimResult, error) {
	r, err := simulateGraph(path, e, held, threads)
	if err != nil {
		return SimResult{}, fmt.Errorf("simulating %s: %w", e.File, err)
	}
	return r, nil
}

func simulateGraph(path string, e onnxgraph.GraphEntry, held []Sample, threads int) (SimResult, error) {
	s, err := ortrun.OpenSession(path, ortrun.SessionOptions{Threads: threads, Optimize: SimOptimize})
	if err != nil {
		return SimResult{}, err
	}
	defer s.Close()
	want := "hidden_out"
	if e.Kind == onnxgraph.KindHead {
		want = "logits"
	}
	var main, delta quant.ErrStats
	top1 := 0
	for _, sm := range held {
		got, err := s.Run(sm.Feeds)
		if err != nil {
			return SimResult{}, fmt.Errorf("position %d: %w", sm.Pos, err)
		}
		ref, y := sm.Want[want], got[want].Floats()
		main.Merge(quant.Compare(ref, y))
		if in, ok := sm.Feeds["hidden_in"]; ok && want == "hidden_out" {
			dr, dy := make([]float32, len(ref)), make([]float32, len(ref))
			for i, x := range in.F32 {
				dr[i], dy[i] = ref[i]-x, y[i]-x
			}
			delta.Merge(quant.Compare(dr, dy))
		}
		if want == "logits" && forward.ArgMax(ref) == forward.ArgMax(y) {
			top1++
		}
	}
	r := SimResult{SNR: main.SNRdB()}
	if e.Kind == onnxgraph.KindLayer || e.Kind == onnxgraph.KindBlock {
		d := delta.SNRdB()
		r.Delta = &d
	}
	if want == "logits" && len(held) > 0 {
		t := float64(top1) / float64(len(held))
		r.Top1 = &t
	}
	return r, nil
}
