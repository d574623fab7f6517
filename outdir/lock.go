package outdir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Every temporary folder or file a run keeps (beside a target, or a
// Scratch folder) is locked with flock(2) for as long as the run uses it.
// The kernel drops the lock when the process ends, however it ends
// (SIGKILL included), and a lock is seen from every PID namespace sharing
// the file system: a process ID alone is not (a writer in a container
// has a PID the host may give to nobody, or to another process). A
// leftover is removed only when its name is ours, its process ID is not
// alive here, and its lock can be taken.

// lockPath opens path (a folder or a regular file, never following a
// link) and takes its exclusive lock without waiting; the lock lasts until
// the returned file is closed.
func lockPath(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// lockFile takes f's exclusive lock without waiting.
func lockFile(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

// abandoned returns the lock of a leftover named with process pid when
// that process is gone: not alive in this PID namespace and holding no
// lock on it (nil otherwise). The caller closes the returned file once
// it has removed or moved the leftover.
func abandoned(path string, pid int) *os.File {
	if pid == os.Getpid() || processAlive(pid) {
		return nil
	}
	f, err := lockPath(path)
	if err != nil {
		return nil
	}
	return f
}

// ErrInterrupted is returned by Commit and File.Write once Interrupt was
// called: nothing is moved into place after an interrupt.
var ErrInterrupted = fmt.Errorf("interrupted before the output was moved into place: %w", context.Canceled)

// Interrupt stops every output of this process from being moved into
// place from now on (SIGINT/SIGTERM): a Commit or File.Write that has not
// begun moving fails with ErrInterrupted and removes its temporary output.
func Interrupt() {
	writing.Lock()
	writing.stopped = true
	writing.Unlock()
}

// Scratch is a private temporary folder in the system's temporary folder
// for files a command uses and then deletes (eval's base log-probs when
// no --base-logits file is kept), named PREFIX-PID-RANDOM and locked while
// the process uses it. Remove deletes it; so does AbortWriting, and a
// later NewScratch with the same prefix deletes the folders of runs that
// were killed before they could (only folders of this user, named so,
// whose process is gone and whose lock is free).
type Scratch struct {
	path string
	lock *os.File
}

// NewScratch sweeps abandoned scratch folders of prefix and makes a new
// one.
func NewScratch(prefix string) (*Scratch, error) {
	parent := os.TempDir()
	sweepScratch(parent, prefix)
	p, err := os.MkdirTemp(parent, prefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, err
	}
	lock, err := lockPath(p)
	if err != nil {
		os.Remove(p)
		return nil, err
	}
	s := &Scratch{path: p, lock: lock}
	writing.Lock()
	writing.scratch[s] = true
	writing.Unlock()
	return s, nil
}

// Path is the scratch folder.
func (s *Scratch) Path() string { return s.path }

// Remove deletes the folder and what it holds.
func (s *Scratch) Remove() {
	writing.Lock()
	delete(writing.scratch, s)
	writing.Unlock()
	s.remove()
}

func (s *Scratch) remove() {
	_ = os.RemoveAll(s.path)
	s.lock.Close()
}

// sweepScratch removes the abandoned scratch folders of prefix in parent.
func sweepScratch(parent, prefix string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := leftoverPID(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		p := filepath.Join(parent, e.Name())
		if info, err := e.Info(); err != nil || !ownedByMe(info) {
			continue
		}
		if lock := abandoned(p, pid); lock != nil {
			_ = os.RemoveAll(p)
			lock.Close()
		}
	}
}

// leftoverPID is the process ID in a leftover's name, prefix + "PID-...".
func leftoverPID(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	return pid, err == nil
}

// ownedByMe reports whether this process's user owns the file.
func ownedByMe(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// linkTargets lists where the symbolic links inside the folder dir point
// (resolved), for the overlap rule: a Hugging Face cache snapshot's files
// are links into the cache's blobs folder, which an output must not
// replace either. At most maxLinkScan entries are looked at.
func linkTargets(dir string) map[string]string {
	out := map[string]string{}
	n := 0
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > maxLinkScan {
			return filepath.SkipAll
		}
		if e.Type()&os.ModeSymlink != 0 {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				out[p] = r
			}
		}
		return nil
	})
	return out
}

// maxLinkScan bounds the entries of an input folder linkTargets visits (a
// model folder holds tens).
const maxLinkScan = 100000
