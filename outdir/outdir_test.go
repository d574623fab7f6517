package outdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCreateCommitAbort(t *testing.T) {
	parent := t.TempDir()
	target := filepath.Join(parent, "out")

	d, err := Create(target, false)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.Join("a.txt"), []byte("one"), 0o644)
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatal("target exists before Commit")
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	d.Abort() // no-op after commit
	if b, _ := os.ReadFile(filepath.Join(target, "a.txt")); string(b) != "one" {
		t.Fatalf("committed content %q", b)
	}

	if _, err := Create(target, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second Create without force: %v", err)
	}

	d, err = CreateOwned(target, true, anyFolder)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.Join("b.txt"), []byte("two"), 0o644)
	d.Abort()
	if b, _ := os.ReadFile(filepath.Join(target, "a.txt")); string(b) != "one" {
		t.Fatal("abort touched the existing output")
	}

	d, _ = CreateOwned(target, true, anyFolder)
	os.WriteFile(d.Join("b.txt"), []byte("two"), 0o644)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "a.txt")); !os.IsNotExist(err) {
		t.Fatal("forced replace kept the old file")
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Fatalf("leftovers beside the target: %v", entries)
	}
}

func TestStaleTempRemoved(t *testing.T) {
	parent := t.TempDir()
	// A temp folder of a process that cannot exist (pid above pid_max).
	stale := filepath.Join(parent, ".out"+tmpTag+"99999999-123")
	os.Mkdir(stale, 0o755)
	live := filepath.Join(parent, ".out"+tmpTag+"1-456") // pid 1 is alive
	os.Mkdir(live, 0o755)
	d, err := Create(filepath.Join(parent, "out"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Abort()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Error("stale temp folder kept")
	}
	if _, err := os.Stat(live); err != nil {
		t.Error("temp folder of a live process removed")
	}
}

// TestAbortWriting: a folder still being written is removed, a committed
// one is untouched, and the interrupted writer's Commit fails.
func TestAbortWriting(t *testing.T) {
	parent := t.TempDir()
	done, err := Create(filepath.Join(parent, "done"), false)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(done.Join("a.txt"), []byte("one"), 0o644)
	if err := done.Commit(); err != nil {
		t.Fatal(err)
	}
	d, err := Create(filepath.Join(parent, "busy"), false)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(d.Join("b.txt"), []byte("two"), 0o644)
	AbortWriting()
	if _, err := os.Stat(d.Path()); !os.IsNotExist(err) {
		t.Fatalf("temporary folder left: %v", err)
	}
	if err := d.Commit(); err == nil {
		t.Fatal("Commit after AbortWriting succeeded")
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 || entries[0].Name() != "done" {
		t.Fatalf("parent holds %v, want only done", entries)
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "done", "a.txt")); string(b) != "one" {
		t.Fatalf("committed content %q", b)
	}
}
