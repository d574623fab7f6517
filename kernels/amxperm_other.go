//go:build !(linux && amd64)

package kernels

import "errors"

// requestAMX fails off Linux/amd64: the tile permission is a Linux call.
func requestAMX() error { return errors.New("AMX permission requests are Linux/amd64 only") }
