// Package infile opens the files sparkconv reads so that no input can hang
// or exhaust it: only regular files (a symlink is followed to whatever it
// names, and what it names must be a regular file), opened non-blocking so a
// FIFO or device never blocks the open, and small files (JSON) read whole
// only under a size cap checked before reading. A Stamp records what a file
// was when it was read so a change underneath is seen, not mixed in.
package infile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Caps on JSON inputs: far above any real file, far below what would
// exhaust memory.
const (
	ConfigMax    = 4 << 20  // config.json, generation_config.json (real: ~2 KB)
	IndexMax     = 64 << 20 // model.safetensors.index.json (real: ~30 KB to ~2 MB)
	TokenizerMax = 64 << 20 // tokenizer.json (real: 2 to 33 MB; parsing costs ~10x its size)
	ManifestMax  = 64 << 20 // an export's manifest.json
	TextMax      = 1 << 30  // samples text and token-id files, streamed (real: KB to a few hundred MB)
	CPUInfoMax   = 16 << 20 // a /proc/cpuinfo text (real: ~1 KB per core)
	// EvalTextMax caps eval's --samples text, which is tokenized in one
	// piece (the samples joined, as llama.cpp tokenizes its file):
	// splitting it would change the tokens at the joins, so streaming
	// cannot bound the tokenizer's memory (up to ~35 bytes a byte of
	// text). 16 MiB give 4 to 10 million tokens, more than eval's cap of
	// 2^21 (eval.MaxTokens) on every tokenizer tried.
	EvalTextMax = 16 << 20
)

// Open opens path for reading. It refuses anything but a regular file
// (directories, FIFOs, sockets, devices such as /dev/zero) before and after
// the open, and opens with O_NONBLOCK so that a FIFO swapped in between the
// two checks cannot block.
func Open(path string) (*os.File, os.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := regular(path, st); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err = f.Stat()
	if err == nil {
		err = regular(path, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

func regular(path string, st os.FileInfo) error {
	if st.Mode().IsRegular() {
		return nil
	}
	kind := "not a regular file"
	switch m := st.Mode(); {
	case m.IsDir():
		kind = "a folder, not a file"
	case m&os.ModeNamedPipe != 0:
		kind = "a FIFO (named pipe), not a regular file"
	case m&os.ModeSocket != 0:
		kind = "a socket, not a regular file"
	case m&os.ModeDevice != 0:
		kind = "a device, not a regular file"
	}
	return fmt.Errorf("%s: %s", path, kind)
}

// ReadFile reads a whole regular file of at most max bytes. The size is
// checked before reading and again while reading (a file that grows past
// max is refused too). Errors name the file.
func ReadFile(path string, max int64) ([]byte, error) {
	data, _, err := ReadStamped(path, max)
	return data, err
}

// OpenCapped is Open for a file streamed by its reader: one larger than
// max bytes is refused before anything is read, as ReadFile refuses it.
func OpenCapped(path string, max int64) (*os.File, os.FileInfo, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, nil, err
	}
	if st.Size() > max {
		f.Close()
		return nil, nil, tooLarge(path, st.Size(), max)
	}
	return f, st, nil
}

func tooLarge(path string, size, max int64) error {
	return fmt.Errorf("%s: %d bytes, larger than the %s any real file of its kind needs", path, size, human(max))
}

// ReadStamped is ReadFile that also returns the file's Stamp.
func ReadStamped(path string, max int64) ([]byte, Stamp, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, Stamp{}, err
	}
	defer f.Close()
	if st.Size() > max {
		return nil, Stamp{}, tooLarge(path, st.Size(), max)
	}
	// One buffer of the stated size (plus one byte to see growth): no
	// doubling copies, so a file near the cap costs its size in memory.
	data := make([]byte, 0, st.Size()+1)
	data, err = readAllInto(data, io.LimitReader(f, max+1))
	if err != nil {
		return nil, Stamp{}, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, Stamp{}, fmt.Errorf("%s: grew past %s while being read", path, human(max))
	}
	return data, StampOf(path, st), nil
}

// readAllInto is io.ReadAll appending to buf (whose capacity is the
// expected size), growing it only for a file longer than stated.
func readAllInto(buf []byte, r io.Reader) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// Stamp is what a file was when it was read: its identity (device and
// inode), size and modification time.
type Stamp struct {
	Path    string
	Dev     uint64
	Ino     uint64
	Size    int64
	ModTime time.Time
}

// StampOf records st (the file at path).
func StampOf(path string, st os.FileInfo) Stamp {
	s := Stamp{Path: path, Size: st.Size(), ModTime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.Dev, s.Ino = uint64(sys.Dev), sys.Ino
	}
	return s
}

// ErrChanged is wrapped by every error that reports an input changed.
var ErrChanged = errors.New("changed while sparkconv was reading it")

// Check reports an error naming the file when path no longer names the
// same, unmodified file (replaced, rewritten, truncated or removed).
func (s Stamp) Check() error {
	st, err := os.Stat(s.Path)
	if err != nil {
		return fmt.Errorf("%s: %w (%v); nothing written, run again", s.Path, ErrChanged, err)
	}
	return s.compare(st)
}

// CheckOpen is Check for a file held open (so replacing its name does not
// matter, only writes to the file itself).
func (s Stamp) CheckOpen(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", s.Path, err)
	}
	return s.compare(st)
}

func (s Stamp) compare(st os.FileInfo) error {
	now := StampOf(s.Path, st)
	switch {
	case now.Dev != s.Dev || now.Ino != s.Ino:
		return fmt.Errorf("%s: %w (replaced by another file); nothing written, run again", s.Path, ErrChanged)
	case now.Size != s.Size:
		return fmt.Errorf("%s: %w (size %d -> %d bytes); nothing written, run again", s.Path, ErrChanged, s.Size, now.Size)
	case !now.ModTime.Equal(s.ModTime):
		return fmt.Errorf("%s: %w (modified at %s); nothing written, run again", s.Path, ErrChanged, now.ModTime.Format(time.RFC3339Nano))
	}
	return nil
}

// StampFolder stamps what a model is read from in the folder dir: each
// regular file at its top level (a link followed) whose name ends in .json
// or .safetensors. CheckAll then tells whether any changed since.
func StampFolder(dir string) ([]Stamp, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Stamp
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") && !strings.HasSuffix(name, ".safetensors") {
			continue
		}
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if st.Mode().IsRegular() {
			out = append(out, StampOf(p, st))
		}
	}
	return out, nil
}

// CheckAll is Check of every stamp: the first change's error.
func CheckAll(stamps []Stamp) error {
	for _, s := range stamps {
		if err := s.Check(); err != nil {
			return err
		}
	}
	return nil
}
