package outdir

import (
	"context"
	"errors"
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

// TestLockedLeftoverKept: case 27 of issue 30. A temporary folder named
// with a process ID that is not alive here is still kept while another
// process (in another PID namespace, say) holds its lock; once the lock
// is free the next Create removes it.
func TestLockedLeftoverKept(t *testing.T) {
	parent := t.TempDir()
	other := filepath.Join(parent, ".out"+tmpTag+"99999999-7")
	os.Mkdir(other, 0o755)
	held, err := lockPath(other) // a second open file: flock conflicts with it
	if err != nil {
		t.Fatal(err)
	}
	d, err := Create(filepath.Join(parent, "out"), false)
	if err != nil {
		t.Fatal(err)
	}
	d.Abort()
	if _, err := os.Stat(other); err != nil {
		t.Fatal("a locked temporary folder was removed")
	}
	held.Close()
	d, err = Create(filepath.Join(parent, "out"), false)
	if err != nil {
		t.Fatal(err)
	}
	d.Abort()
	if got := names(t, parent); len(got) != 0 {
		t.Fatalf("left: %v", got)
	}
}

// TestInterruptStopsCommit: after Interrupt neither a folder nor a file is
// moved into place, and their temporaries are gone.
func TestInterruptStopsCommit(t *testing.T) {
	defer func() { writing.Lock(); writing.stopped = false; writing.Unlock() }()
	parent := t.TempDir()
	d, err := Create(filepath.Join(parent, "out"), false)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFile(filepath.Join(parent, "f"), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	Interrupt()
	if err := d.Commit(); !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit after Interrupt: %v", err)
	}
	d.Abort()
	if err := f.WriteBytes([]byte("x")); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Write after Interrupt: %v", err)
	}
	if got := names(t, parent); len(got) != 0 {
		t.Fatalf("written after the interrupt: %v", got)
	}
}

// TestScratch: a scratch folder is removed by Remove and by AbortWriting;
// a new one sweeps those of dead, unlocked runs and keeps a locked one
// and those of live processes.
func TestScratch(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	const prefix = "sparkconv-test-"
	dead := filepath.Join(os.TempDir(), prefix+"99999999-1")
	locked := filepath.Join(os.TempDir(), prefix+"99999998-1")
	live := filepath.Join(os.TempDir(), prefix+"1-1") // pid 1 is alive
	for _, p := range []string{dead, locked, live} {
		mk(t, p, "base.safetensors", "half")
	}
	held, err := lockPath(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	s, err := NewScratch(prefix)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{dead: false, locked: true, live: true, s.Path(): true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", p, err == nil, want)
		}
	}
	s.Remove()
	s2, _ := NewScratch(prefix)
	AbortWriting()
	for _, p := range []string{s.Path(), s2.Path()} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s kept", p)
		}
	}
}

// TestLinkedInputsCount: case 4 of issue 30. In a Hugging Face cache the
// snapshot's files are links into blobs/: an output that is blobs, or a
// folder above it, is refused as containing the input's files.
func TestLinkedInputsCount(t *testing.T) {
	cache := t.TempDir()
	blobs, snap := filepath.Join(cache, "blobs"), filepath.Join(cache, "snapshots", "abc")
	mk(t, blobs, "f00d", "weights")
	os.MkdirAll(snap, 0o755)
	os.Symlink("../../blobs/f00d", filepath.Join(snap, "model.safetensors"))
	for _, out := range []string{blobs, filepath.Join(blobs, "f00d")} {
		err := CheckDisjoint(out, snap)
		if !errors.Is(err, ErrOverlap) || !strings.Contains(err.Error(), filepath.Join(snap, "model.safetensors")+" (a link to ") {
			t.Errorf("out %s: %v", out, err)
		}
	}
	if err := CheckDisjoint(filepath.Join(cache, "other"), snap); err != nil {
		t.Errorf("a disjoint output refused: %v", err)
	}
}
