//go:build linux && amd64

package kernels

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// arch_prctl codes for dynamically enabled XSAVE features (Linux 5.16+,
// arch/x86/include/uapi/asm/prctl.h).
const (
	archGetXcompSupp = 0x1021
	archReqXcompPerm = 0x1023
)

// requestAMX asks Linux for permission to use the AMX tile data state
// (XFEATURE_XTILEDATA), without which the first tile instruction faults.
// It fails on CPUs or kernels without AMX.
func requestAMX() error {
	_, _, e := unix.Syscall(unix.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureTile, 0)
	if e == 0 {
		return nil
	}
	var supp uint64
	if _, _, e2 := unix.Syscall(unix.SYS_ARCH_PRCTL, archGetXcompSupp, uintptr(unsafe.Pointer(&supp)), 0); e2 != 0 {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %w (and ARCH_GET_XCOMP_SUPP: %v)", e, e2)
	}
	return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %w (the kernel offers XSAVE features %#x, no tile data)", e, supp)
}
