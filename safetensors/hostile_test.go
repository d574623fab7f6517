package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sparkconv/infile"
)

// TestHFCacheLayout: a Hugging Face cache snapshot holds symlinks into
// ../../blobs; they are followed, while index names stay plain.
func TestHFCacheLayout(t *testing.T) {
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	snap := filepath.Join(root, "snapshots", "0123abcd")
	os.MkdirAll(blobs, 0o755)
	os.MkdirAll(snap, 0o755)
	shard := file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, []byte{0, 0, 128, 63})
	writeTemp(t, blobs, "9f1e", shard)
	writeTemp(t, blobs, "77aa", []byte(`{"weight_map":{"a":"model-00001-of-00001.safetensors"}}`))
	os.Symlink("../../blobs/9f1e", filepath.Join(snap, "model-00001-of-00001.safetensors"))
	os.Symlink("../../blobs/77aa", filepath.Join(snap, IndexFile))
	c, err := OpenDir(snap)
	if err != nil {
		t.Fatalf("HF cache snapshot: %v", err)
	}
	defer c.Close()
	if _, v, err := c.Float32("a"); err != nil || v[0] != 1 {
		t.Fatalf("read through the link: %v %v", v, err)
	}
	// The single-file layout through a link works too.
	single := t.TempDir()
	os.Symlink(filepath.Join(blobs, "9f1e"), filepath.Join(single, SingleFile))
	c2, err := OpenDir(single)
	if err != nil {
		t.Fatalf("linked model.safetensors: %v", err)
	}
	c2.Close()
}

// TestHostileFiles: a FIFO, a device or a folder in place of a shard or an
// index is refused at once, naming it; an oversized index is refused
// before it is read.
func TestHostileFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(dir string) // creates dir/model.safetensors or the index
		want string
	}{
		{"fifo shard", func(d string) { syscall.Mkfifo(filepath.Join(d, SingleFile), 0o644) }, "FIFO"},
		{"device shard", func(d string) { os.Symlink("/dev/zero", filepath.Join(d, SingleFile)) }, "device"},
		{"folder shard", func(d string) { os.Mkdir(filepath.Join(d, SingleFile), 0o755) }, "folder"},
		{"fifo index", func(d string) { syscall.Mkfifo(filepath.Join(d, IndexFile), 0o644) }, "FIFO"},
		{"zero index", func(d string) { os.Symlink("/dev/zero", filepath.Join(d, IndexFile)) }, "device"},
		{"huge index", func(d string) {
			f, _ := os.Create(filepath.Join(d, IndexFile))
			f.Truncate(infile.IndexMax + 1)
			f.Close()
		}, "larger than"},
		{"fifo listed shard", func(d string) {
			os.WriteFile(filepath.Join(d, IndexFile), []byte(`{"weight_map":{"a":"s.safetensors"}}`), 0o644)
			syscall.Mkfifo(filepath.Join(d, "s.safetensors"), 0o644)
		}, "FIFO"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.make(dir)
			done := make(chan error, 1)
			go func() {
				ck, err := OpenDir(dir)
				if err == nil {
					ck.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("%v, want an error naming the file and %q", err, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("OpenDir hangs")
			}
		})
	}
}

// TestShrinkingFile: a shard truncated while mapped gives an error naming
// it, both when a tensor is asked for afterwards and when a guarded reader
// already holds the mapping (the fault would otherwise be a SIGBUS crash).
func TestShrinkingFile(t *testing.T) {
	dir := t.TempDir()
	page := os.Getpagesize()
	data := make([]byte, 4*page)
	for i := range data {
		data[i] = 0x3f
	}
	header := `{"a":{"dtype":"BF16","shape":[` + itoa(len(data)/2) + `],"data_offsets":[0,` + itoa(len(data)) + `]}}`
	p := writeTemp(t, dir, SingleFile, file(header, data))
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, raw, err := c.Raw("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unchanged(); err != nil {
		t.Fatalf("unchanged: %v", err)
	}
	if err := os.Truncate(p, 16); err != nil {
		t.Fatal(err)
	}
	if err := c.Unchanged(); !errors.Is(err, infile.ErrChanged) || !strings.Contains(err.Error(), p) {
		t.Errorf("Unchanged after truncation: %v", err)
	}
	if _, _, err := c.Raw("a"); !errors.Is(err, infile.ErrChanged) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("Raw after truncation: %v", err)
	}
	if _, _, err := c.Float32("a"); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("Float32 after truncation: %v", err)
	}
	sum := 0
	err = Guard(func() error {
		for _, b := range raw[len(raw)-page:] {
			sum += int(b)
		}
		return nil
	})
	if !errors.Is(err, infile.ErrChanged) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "faulted") {
		t.Errorf("guarded read of a truncated mapping: %v (sum %d)", err, sum)
	}
	ti, _ := c.Info("a")
	if err := Guard(func() error { return CheckFinite(ti, raw) }); !errors.Is(err, infile.ErrChanged) {
		t.Errorf("CheckFinite of a truncated mapping: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
