package infile

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "f.json")
	os.WriteFile(file, []byte(`{"a": 1}`), 0o644)
	link := filepath.Join(dir, "link.json")
	os.Symlink("f.json", link)
	zeroLink := filepath.Join(dir, "zero.json")
	os.Symlink("/dev/zero", zeroLink)
	for _, c := range []struct {
		path, want string
	}{
		{fifo, "FIFO"},
		{dir, "folder"},
		{"/dev/zero", "device"},
		{zeroLink, "device"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(c.path, ConfigMax); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Errorf("%s: %v, want an error naming it and %q", c.path, err, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: ReadFile hangs", c.path)
		}
	}
	for _, p := range []string{file, link} {
		if b, err := ReadFile(p, ConfigMax); err != nil || string(b) != `{"a": 1}` {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
}

func TestReadFileCap(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.json")
	os.WriteFile(p, make([]byte, 5000), 0o644)
	if _, err := ReadFile(p, 4999); err == nil || !strings.Contains(err.Error(), "5000 bytes") {
		t.Errorf("over the cap: %v", err)
	}
	if b, err := ReadFile(p, 5000); err != nil || len(b) != 5000 {
		t.Errorf("at the cap: %d %v", len(b), err)
	}
}

func TestStampSeesChanges(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	os.WriteFile(p, []byte("one"), 0o644)
	_, s, err := ReadStamped(p, ConfigMax)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("unchanged file: %v", err)
	}
	// Same size, new content and mtime.
	os.WriteFile(p, []byte("two"), 0o644)
	os.Chtimes(p, time.Now(), time.Now().Add(time.Hour))
	if err := s.Check(); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), p) {
		t.Errorf("rewritten: %v", err)
	}
	// Replaced by rename (a new inode).
	_, s, _ = ReadStamped(p, ConfigMax)
	os.WriteFile(p+".new", []byte("two"), 0o644)
	os.Rename(p+".new", p)
	if err := s.Check(); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("replaced: %v", err)
	}
	os.Remove(p)
	if err := s.Check(); !errors.Is(err, ErrChanged) {
		t.Errorf("removed: %v", err)
	}
}

// TestReadFileOneBuffer: a file is read into one buffer of its size, not
// grown by doubling (a 500 MB file once cost 1.26 GB resident).
func TestReadFileOneBuffer(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, make([]byte, 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	data, err := ReadFile(p, 64<<20)
	runtime.ReadMemStats(&after)
	if err != nil || len(data) != 32<<20 {
		t.Fatalf("%d bytes, %v", len(data), err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 33<<20 {
		t.Errorf("reading 32 MiB allocated %d bytes", grew)
	}
}
