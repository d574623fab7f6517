//go:build unix

package tokenizer

import "syscall"

// processCPUSeconds is the user+system CPU time of this process, for
// benchmark metrics that do not depend on how busy the machine is.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
