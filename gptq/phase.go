package gptq

import (
	"context"
	"runtime/pprof"
)

// setPhase labels the calling goroutine gptq=name until the next call;
// the goroutines the kernels start inherit it, so a CPU profile of a
// conversion splits by phase: forward, hessian, factor, solve, rtn,
// heldout, head (go tool pprof -tagfocus gptq=hessian). Free when no
// profile runs.
func setPhase(name string) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("gptq", name)))
}
