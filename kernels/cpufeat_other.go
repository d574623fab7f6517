//go:build !amd64

package kernels

import "runtime"

// probeCPU reports no x86 features off amd64 (the portable kernels run).
func probeCPU() Features { return Features{Arch: runtime.GOARCH} }
