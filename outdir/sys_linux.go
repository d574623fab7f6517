//go:build linux

package outdir

import (
	"os"

	"golang.org/x/sys/unix"
)

// The Linux system calls outdir uses: renameat2's flags, O_DIRECT and
// sync_file_range (sys_other.go has the fallbacks).

func exchangeRename(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

func noReplaceRename(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE)
}

// setDirect sets or clears O_DIRECT on f.
func setDirect(f *os.File, on bool) error {
	fd := f.Fd()
	fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if on {
		fl |= unix.O_DIRECT
	} else {
		fl &^= unix.O_DIRECT
	}
	_, err = unix.FcntlInt(fd, unix.F_SETFL, fl)
	return err
}

// startWriteBack asks the kernel to start writing [off, off+n) of fd back
// (advisory: Close's fsync makes the file durable either way).
func startWriteBack(fd int, off, n int64) {
	_ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// waitWriteBack writes [off, off+n) back and waits for it.
func waitWriteBack(fd int, off, n int64) {
	_ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
}
