// Package outdir makes command outputs all-or-nothing: a folder is built
// under a temporary name beside its target, fsynced, and renamed into place
// only when complete. An error or an interrupt removes the temporary folder;
// an existing target is replaced only when the caller asks (--force).
package outdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const tmpTag = ".sparkconv-tmp-"

// Dir is an output folder under construction.
type Dir struct {
	target string
	tmp    string
	force  bool
	done   bool
}

// Create starts building the folder target. It refuses an existing target
// unless force is set, and removes temporary folders that earlier killed
// runs left beside it.
func Create(target string, force bool) (*Dir, error) {
	if target == "" {
		return nil, errors.New("output folder not given")
	}
	target = filepath.Clean(target)
	if _, err := os.Lstat(target); err == nil && !force {
		return nil, fmt.Errorf("%s already exists (use --force to replace it)", target)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	parent := filepath.Dir(target)
	if st, err := os.Stat(parent); err != nil {
		return nil, fmt.Errorf("output parent folder: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("output parent %s is not a folder", parent)
	}
	removeStale(parent, filepath.Base(target))
	prefix := "." + filepath.Base(target) + tmpTag + strconv.Itoa(os.Getpid()) + "-"
	tmp, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return nil, err
	}
	return &Dir{target: target, tmp: tmp, force: force}, nil
}

// removeStale deletes temporary folders of target whose process is gone.
func removeStale(parent, base string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	prefix := "." + base + tmpTag
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(parent, e.Name()))
	}
}

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

// Commit fsyncs the folder and renames it into place, replacing an existing
// target when force was given.
func (d *Dir) Commit() error {
	if d.done {
		return errors.New("output already committed or aborted")
	}
	if err := syncTree(d.tmp); err != nil {
		return fmt.Errorf("fsync %s: %w", d.tmp, err)
	}
	var old string
	if _, err := os.Lstat(d.target); err == nil {
		if !d.force {
			return fmt.Errorf("%s appeared while writing; not replacing it", d.target)
		}
		old = d.tmp + ".old"
		if err := os.Rename(d.target, old); err != nil {
			return err
		}
	}
	if err := os.Rename(d.tmp, d.target); err != nil {
		if old != "" {
			_ = os.Rename(old, d.target)
		}
		return err
	}
	d.done = true
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			return err
		}
	}
	return syncPath(filepath.Dir(d.target))
}

// Abort removes the temporary folder. It is safe to defer after Commit.
func (d *Dir) Abort() {
	if d.done {
		return
	}
	d.done = true
	_ = os.RemoveAll(d.tmp)
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

// CopyFile copies src to dst inside the folder being built.
func (d *Dir) CopyFile(src, name string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(d.Join(name), data, 0o644)
}
