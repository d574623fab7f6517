//go:build !unix

package tokenizer

// processCPUSeconds is unavailable here; CPU-time metrics report 0.
func processCPUSeconds() float64 { return 0 }
