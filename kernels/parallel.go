package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Parallel splits [0,n) into at most GOMAXPROCS contiguous ranges of nearly
// equal size and calls fn on each concurrently, returning when all are done.
// The last range runs on the calling goroutine. n <= 0 does nothing.
func Parallel(n int, fn func(lo, hi int)) { parallelGrain(n, 1, fn) }

// parallelGrain is Parallel for cheap per-item work: it uses no more workers
// than n/grain, so tiny loops stay on the calling goroutine.
func parallelGrain(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	w := min(runtime.GOMAXPROCS(0), (n+grain-1)/grain)
	if w <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + w - 1) / w
	lo := 0
	for ; lo+chunk < n; lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, lo+chunk)
	}
	fn(lo, n)
	wg.Wait()
}

// parallelTasks runs fn(i) for every task i in [0,n) on up to GOMAXPROCS
// workers that pull tasks from a shared counter, so uneven tasks (or a core
// busy with other work) do not leave a worker idle. fn receives the worker
// index w in [0, workers) so it can use per-worker scratch buffers.
func parallelTasks(n int, fn func(w, i int)) {
	if n <= 0 {
		return
	}
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	run := func(w int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			fn(w, i)
		}
	}
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			run(w)
		}(w)
	}
	run(0)
	wg.Wait()
}

// numWorkers is the number of workers parallelTasks would use for n tasks.
func numWorkers(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n))
}
