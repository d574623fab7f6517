package outdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// File is one output file (eval --base-logits and --report, forward
// --dump, sanitize -o) under the rules of an output folder: checked before
// any work, written under a temporary name beside it, fsynced and renamed
// into place, never one of the inputs or inside one, and with force an
// existing file is replaced only when its Owner recognises it.
type File struct {
	target string
	force  bool
	owner  Owner
	guard  func() error
}

// Guard sets a check run once the file is complete, before it is moved
// into place: its error (an input changed meanwhile) leaves nothing.
func (f *File) Guard(check func() error) { f.guard = check }

// NewFile checks that target may be written and returns it to be written
// later: it must not be, lie inside or contain any of inputs, its parent
// must be a folder, and an existing target is refused unless force, and
// then unless it is a regular file owner recognises. Call it before the
// work whose result the file holds.
func NewFile(target string, force bool, owner Owner, inputs ...string) (*File, error) {
	target, err := checkPlace("output file", target, inputs)
	if err != nil {
		return nil, err
	}
	recoverStale(filepath.Dir(target), filepath.Base(target))
	f := &File{target: target, force: force, owner: owner}
	if err := f.check(); err != nil {
		return nil, err
	}
	// The folder must take a new file now, not only after the work (a
	// read-only file system, a folder without write permission).
	p, err := f.Begin()
	if err != nil {
		return nil, err
	}
	p.Abort()
	return f, nil
}

// Target is the file's path.
func (f *File) Target() string { return f.target }

// Exists reports whether the target exists now.
func (f *File) Exists() bool {
	_, err := os.Lstat(f.target)
	return err == nil
}

func (f *File) check() error {
	_, err := os.Lstat(f.target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !f.force:
		return fmt.Errorf("%s already exists (use --force to replace it)", f.target)
	}
	return checkReplace(f.target, false, f.owner)
}

// Write creates the file: fill writes a new temporary file beside the
// target (mode 0644 less the umask), which is fsynced, checked again
// against an existing target, and renamed into place; the parent folder
// is fsynced. On any error, or an interrupt's AbortWriting, nothing is
// left behind.
func (f *File) Write(fill func(w *os.File) error) error {
	p, err := f.Begin()
	if err != nil {
		return err
	}
	if err := fill(p.tmp); err != nil { // fill's errors name what failed
		p.Abort()
		return err
	}
	return p.Commit()
}

// Pending is a File being written over the run of a command (a CPU
// profile): a temporary file beside the target, locked and removed by
// AbortWriting, until Commit moves it into place or Abort removes it.
type Pending struct {
	f   *File
	tmp *os.File
}

// Begin creates the temporary file Write fills.
func (f *File) Begin() (*Pending, error) {
	tmp, err := os.CreateTemp(filepath.Dir(f.target), prefix(f.target, tmpTag))
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", f.target, err)
	}
	if err := lockFile(tmp); err != nil { // released when tmp is closed
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("writing %s: %w", f.target, err)
	}
	writing.Lock()
	writing.files[tmp.Name()] = true
	writing.Unlock()
	return &Pending{f: f, tmp: tmp}, nil
}

// File is the temporary file to write.
func (p *Pending) File() *os.File { return p.tmp }

func (p *Pending) forget() {
	writing.Lock()
	delete(writing.files, p.tmp.Name())
	writing.Unlock()
}

// Abort removes the temporary file.
func (p *Pending) Abort() {
	p.forget()
	p.tmp.Close()
	os.Remove(p.tmp.Name())
}

// Commit fsyncs the temporary file, checks the target again and renames
// the file into place, then fsyncs the parent folder; on error nothing is
// left behind.
func (p *Pending) Commit() error {
	defer p.forget()
	name := p.tmp.Name()
	err := p.tmp.Chmod(0o644 &^ Umask())
	if err == nil {
		err = p.tmp.Sync()
	}
	if err == nil && p.f.guard != nil {
		if err = p.f.guard(); err != nil {
			p.tmp.Close()
			os.Remove(name)
			return err // the guard's error names what changed
		}
	}
	if err == nil {
		err = p.f.place(name) // still locked: a sweeper leaves it alone
	}
	if cerr := p.tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("writing %s: %w", p.f.target, err)
	}
	return syncPath(filepath.Dir(p.f.target))
}

// WriteBytes writes data as the file.
func (f *File) WriteBytes(data []byte) error {
	return f.Write(func(w *os.File) error {
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("writing %s: %w", f.target, err)
		}
		return nil
	})
}

// place renames the complete temporary file to the target: never over a
// file that appeared meanwhile without force, and with force only over
// one the owner recognises.
func (f *File) place(tmp string) error {
	writing.Lock()
	stopped := writing.stopped
	delete(writing.files, tmp) // AbortWriting leaves it to this rename now
	writing.Unlock()
	if stopped {
		return ErrInterrupted
	}
	if err := f.check(); err != nil {
		return err
	}
	if !f.force {
		err := renameNoReplace(tmp, f.target)
		if errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("%s appeared while writing; not replacing it", f.target)
		}
		return err
	}
	return os.Rename(tmp, f.target)
}
