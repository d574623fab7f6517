// Package outdir makes command outputs all-or-nothing: a folder is built
// under a temporary name beside its target, fsynced, and renamed into place
// only when complete. An error or an interrupt removes the temporary folder;
// an existing target is replaced only when the caller asks (--force), and
// then atomically: renameat2(RENAME_EXCHANGE) swaps the new folder and the
// old one in one step, so the target never goes missing. Where the file
// system cannot exchange, a two-step replace marks each step in the
// temporary folders' names and the next run completes a step a crash
// interrupted. An output that is an input, lies inside one or contains one
// (a folder input's links followed) is refused, with or without --force.
// Commit marks every folder as sparkconv's (MarkerName), and --force
// replaces only a marked one. Temporary folders and files are locked
// while in use, so a later run removes only those whose writer is gone.
// After Interrupt nothing more is moved into place. Folders honour the
// umask.
package outdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The names of the folders a run keeps beside its target: ".NAME" + tag +
// "PID-RANDOM". tmpTag is a folder being written (or, after an exchange,
// the old output being removed); newTag a complete folder about to become
// the target, oldTag the old target set aside by the two-step replace.
const (
	tmpTag = ".sparkconv-tmp-"
	newTag = ".sparkconv-new-"
	oldTag = ".sparkconv-old-"
)

// ErrOverlap is wrapped by the error Create returns for an output that is,
// holds or lies inside one of the inputs.
var ErrOverlap = errors.New("output overlaps an input")

// Dir is an output folder under construction.
type Dir struct {
	target string
	tmp    string
	force  bool
	owner  Owner
	done   bool
	lock   *os.File // tmp's lock, held until Commit or Abort
}

// Create starts building the folder target. It refuses an existing target
// unless force is set, and with force one that is not a folder
// SparkconvFolder recognises; it refuses a target that overlaps any of
// inputs (files or folders the command reads), completes or undoes a
// replace that a killed run left half done, and removes temporary folders
// that earlier killed runs left beside it.
func Create(target string, force bool, inputs ...string) (*Dir, error) {
	return CreateOwned(target, force, SparkconvFolder, inputs...)
}

// CreateOwned is Create with the Owner that recognises a folder --force
// may replace.
func CreateOwned(target string, force bool, owner Owner, inputs ...string) (*Dir, error) {
	target, err := checkPlace("output folder", target, inputs)
	if err != nil {
		return nil, err
	}
	parent := filepath.Dir(target)
	recoverStale(parent, filepath.Base(target))
	if _, err := os.Lstat(target); err == nil && !force {
		return nil, fmt.Errorf("%s already exists (use --force to replace it)", target)
	} else if err == nil {
		if err := checkReplace(target, true, owner); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, prefix(target, tmpTag))
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp, 0o777&^Umask()); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	lock, err := lockPath(tmp)
	if err != nil {
		os.Remove(tmp)
		return nil, err
	}
	d := &Dir{target: target, tmp: tmp, force: force, owner: owner, lock: lock}
	writing.Lock()
	writing.dirs[d] = true
	writing.Unlock()
	return d, nil
}

// checkPlace cleans target and refuses it when it is empty, overlaps
// one of inputs, or its parent is not a folder: what every output, a
// folder or a file, must pass before any work.
func checkPlace(what, target string, inputs []string) (string, error) {
	if target == "" {
		return "", fmt.Errorf("%s not given", what)
	}
	target = filepath.Clean(target)
	if err := CheckDisjoint(target, inputs...); err != nil {
		return "", err
	}
	parent := filepath.Dir(target)
	if st, err := os.Stat(parent); err != nil {
		return "", fmt.Errorf("output parent folder: %w", err)
	} else if !st.IsDir() {
		return "", fmt.Errorf("output parent %s is not a folder", parent)
	}
	return target, nil
}

// writing holds the folders this process is writing: created, not yet
// being committed, not aborted; and whether Interrupt was called.
var writing = struct {
	sync.Mutex
	dirs    map[*Dir]bool
	files   map[string]bool // temporary files of File.Write
	scratch map[*Scratch]bool
	stopped bool
}{dirs: map[*Dir]bool{}, files: map[string]bool{}, scratch: map[*Scratch]bool{}}

func (d *Dir) stopWriting() {
	writing.Lock()
	delete(writing.dirs, d)
	writing.Unlock()
}

// beginCommit takes d off the folders AbortWriting removes, unless an
// interrupt came first.
func (d *Dir) beginCommit() error {
	writing.Lock()
	defer writing.Unlock()
	if writing.stopped {
		return ErrInterrupted
	}
	delete(writing.dirs, d)
	return nil
}

func (d *Dir) unlock() {
	if d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
}

// AbortWriting removes every temporary folder and file this process is
// still writing, and its Scratch folders, for a process that must exit
// before its commands could clean up (an interrupt's grace period expired
// during a long computation, or a second signal). A folder whose Commit
// has begun is left to it (or, if the process dies mid-commit, to the
// next run's recovery). Writers still running lose their files with the
// folder; their Commit then fails.
func AbortWriting() {
	writing.Lock()
	defer writing.Unlock()
	for d := range writing.dirs {
		_ = os.RemoveAll(d.tmp)
		delete(writing.dirs, d)
	}
	for name := range writing.files {
		_ = os.Remove(name)
		delete(writing.files, name)
	}
	for s := range writing.scratch {
		s.remove()
		delete(writing.scratch, s)
	}
}

func prefix(target, tag string) string {
	return "." + filepath.Base(target) + tag + strconv.Itoa(os.Getpid()) + "-"
}

// CheckDisjoint refuses an output path that is one of inputs, lies inside
// one, or contains one (symlinks resolved, so a link to the input counts,
// and so does what the links inside an input folder point to: a Hugging
// Face cache snapshot's files live in the cache's blobs folder).
func CheckDisjoint(out string, inputs ...string) error {
	o, err := realPath(out)
	if err != nil {
		return err
	}
	for _, in := range inputs {
		if in == "" {
			continue
		}
		i, err := realPath(in)
		if err != nil {
			return err
		}
		if err := disjoint(out, o, in, i); err != nil {
			return err
		}
		if st, err := os.Stat(i); err != nil || !st.IsDir() {
			continue
		}
		for link, target := range linkTargets(i) {
			name := fmt.Sprintf("%s (a link to %s)", filepath.Join(in, strings.TrimPrefix(link, i+string(filepath.Separator))), target)
			if err := disjoint(out, o, name, target); err != nil {
				return err
			}
		}
	}
	return nil
}

// disjoint refuses out (resolved: o) against the input in (resolved: i).
func disjoint(out, o, in, i string) error {
	switch {
	case o == i:
		return fmt.Errorf("%w: %s is the input %s itself; choose another output", ErrOverlap, out, in)
	case within(o, i):
		return fmt.Errorf("%w: %s lies inside the input %s; choose an output outside it", ErrOverlap, out, in)
	case within(i, o):
		return fmt.Errorf("%w: %s contains the input %s; replacing it would delete the input", ErrOverlap, out, in)
	}
	return nil
}

// within reports whether p lies strictly inside dir.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// realPath is p made absolute with every symlink of its longest existing
// prefix resolved.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r, nil
	}
	parent := filepath.Dir(abs)
	if parent == abs {
		return abs, nil
	}
	rp, err := realPath(parent)
	if err != nil {
		return "", err
	}
	return filepath.Join(rp, filepath.Base(abs)), nil
}

// stale is a folder beside the target left by a process that is gone,
// with its lock.
type stale struct {
	path string
	tag  string
	lock *os.File
}

// recoverStale finishes what killed runs left: a target missing after the
// first step of a two-step replace gets the complete new folder (or, when
// the crash came before it was marked complete, the old one back); every
// other leftover of a dead process is removed.
func recoverStale(parent, base string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	var found []stale
	for _, e := range entries {
		for _, tag := range []string{tmpTag, newTag, oldTag} {
			pid, ok := leftoverPID(e.Name(), "."+base+tag)
			if !ok {
				continue
			}
			p := filepath.Join(parent, e.Name())
			if lock := abandoned(p, pid); lock != nil {
				found = append(found, stale{p, tag, lock})
			}
		}
	}
	target := filepath.Join(parent, base)
	for _, want := range []string{newTag, oldTag} {
		if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
			break
		}
		for _, s := range found {
			if s.tag == want && renameNoReplace(s.path, target) == nil {
				break
			}
		}
	}
	for _, s := range found {
		_ = os.RemoveAll(s.path)
		s.lock.Close()
	}
}

// processAlive reports whether process pid exists in this PID namespace
// (a live writer elsewhere still holds its lock).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Path is the temporary folder to write into.
func (d *Dir) Path() string { return d.tmp }

// Target is the final folder name.
func (d *Dir) Target() string { return d.target }

// Join returns a path inside the temporary folder.
func (d *Dir) Join(name string) string { return filepath.Join(d.tmp, name) }

// The renames, replaceable by tests to play a file system without
// renameat2 flags.
var (
	renameExchange  = exchangeRename
	renameNoReplace = func(a, b string) error {
		err := noReplaceRename(a, b)
		if unsupported(err) { // no renameat2 flags here: check, then rename
			if _, lerr := os.Lstat(b); lerr == nil {
				return syscall.EEXIST
			}
			return os.Rename(a, b)
		}
		return err
	}
	// crashAt, when set by a test, is called between the steps of the
	// two-step replace; a non-nil return stops there as a crash would.
	crashAt func(step string) error
)

func unsupported(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.ENOTSUP)
}

// Commit fsyncs the folder and moves it into place: a missing target is
// created without ever replacing a folder that appeared meanwhile; an
// existing target (with force) is exchanged atomically, or replaced in two
// recoverable steps where the file system cannot exchange.
func (d *Dir) Commit() error {
	if d.done {
		return errors.New("output already committed or aborted")
	}
	if err := d.beginCommit(); err != nil {
		return err
	}
	defer d.unlock()
	if err := writeMarker(d.tmp); err != nil {
		return fmt.Errorf("marking %s as sparkconv's: %w", d.target, err)
	}
	if err := syncTree(d.tmp); err != nil {
		return fmt.Errorf("fsync %s: %w", d.tmp, err)
	}
	parent := filepath.Dir(d.target)
	err := renameNoReplace(d.tmp, d.target)
	if errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
		if !d.force {
			return fmt.Errorf("%s appeared while writing; not replacing it", d.target)
		}
		if err := checkReplace(d.target, true, d.owner); err != nil {
			return err
		}
		err = d.replace()
	}
	if err != nil {
		return fmt.Errorf("move %s into place: %w", d.target, err)
	}
	d.done = true
	return syncPath(parent)
}

// replace puts the finished folder in place of the existing target.
func (d *Dir) replace() error {
	err := renameExchange(d.tmp, d.target)
	if err == nil {
		// d.tmp now holds the old output; a crash here leaves it to the
		// next run's cleanup, the target is already the new one.
		d.done = true
		_ = syncPath(filepath.Dir(d.target))
		return os.RemoveAll(d.tmp)
	}
	if !unsupported(err) {
		return err
	}
	return d.twoStep()
}

// twoStep replaces the target where rename-exchange is unavailable:
// tmp -> new (marks it complete), target -> old, new -> target, remove old.
// Whichever step a crash stops at, recoverStale completes or undoes it.
func (d *Dir) twoStep() error {
	parent := filepath.Dir(d.target)
	newPath := filepath.Join(parent, strings.Replace(filepath.Base(d.tmp), tmpTag, newTag, 1))
	oldPath := filepath.Join(parent, strings.Replace(filepath.Base(d.tmp), tmpTag, oldTag, 1))
	if err := os.Rename(d.tmp, newPath); err != nil {
		return err
	}
	d.tmp = newPath // Abort removes it if a later step fails
	if old, err := lockPath(d.target); err == nil {
		defer old.Close() // the old output stays locked while set aside
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		{"set old aside", func() error { return os.Rename(d.target, oldPath) }},
		{"move new in", func() error { return renameNoReplace(newPath, d.target) }},
	}
	for _, s := range steps {
		if crashAt != nil {
			if err := crashAt(s.name); err != nil {
				d.done = true // a crash leaves everything as it is
				return err    // and its locks go with the process
			}
		}
		if err := s.fn(); err != nil {
			if s.name == "move new in" {
				_ = renameNoReplace(oldPath, d.target)
			}
			return err
		}
	}
	d.done = true
	_ = syncPath(parent)
	return os.RemoveAll(oldPath)
}

// Abort removes the temporary folder. It is safe to defer after Commit.
func (d *Dir) Abort() {
	if d.done {
		return
	}
	d.done = true
	d.stopWriting()
	_ = os.RemoveAll(d.tmp)
	d.unlock()
}

func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type()&os.ModeSymlink != 0 {
			return nil
		}
		return syncPath(p)
	})
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// WriteFile writes data as a new file name inside the folder being built
// (mode 0644 less the umask) and fsyncs it.
func (d *Dir) WriteFile(name string, data []byte) error {
	f, err := os.OpenFile(d.Join(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}

var (
	umaskOnce sync.Once
	umask     os.FileMode
)

// Umask is the process's file mode creation mask, read once from
// /proc/self/status (no change to the mask, so no race with other
// goroutines creating files), else by setting and restoring it.
func Umask() os.FileMode {
	umaskOnce.Do(func() {
		if b, err := os.ReadFile("/proc/self/status"); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "Umask:"); ok {
					if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
						umask = os.FileMode(m)
						return
					}
				}
			}
		}
		m := unix.Umask(0o22)
		unix.Umask(m)
		umask = os.FileMode(m)
	})
	return umask
}
