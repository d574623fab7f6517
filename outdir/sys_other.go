//go:build !linux

package outdir

import (
	"os"
	"syscall"
)

// Without renameat2 flags, O_DIRECT or sync_file_range: the renames report
// ENOTSUP (outdir then checks and renames in two steps), streams stay
// buffered and rely on Close's fsync.

func exchangeRename(a, b string) error { return syscall.ENOTSUP }

func noReplaceRename(a, b string) error { return syscall.ENOTSUP }

func setDirect(f *os.File, on bool) error { return syscall.ENOTSUP }

func startWriteBack(fd int, off, n int64) {}

func waitWriteBack(fd int, off, n int64) {}
