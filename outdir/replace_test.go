package outdir

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func write(t *testing.T, d *Dir, name, content string) {
	t.Helper()
	if err := d.WriteFile(name, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestOverlapRefused(t *testing.T) {
	parent := t.TempDir()
	model := filepath.Join(parent, "model")
	os.Mkdir(model, 0o755)
	os.WriteFile(filepath.Join(model, "config.json"), []byte("{}"), 0o644)
	link := filepath.Join(parent, "link")
	os.Symlink("model", link)
	for _, c := range []struct {
		out, want string
	}{
		{model, "is the input"},
		{model + "/", "is the input"},
		{link, "is the input"},
		{filepath.Join(model, "out"), "inside the input"},
		{filepath.Join(link, "out"), "inside the input"},
		{parent, "contains the input"},
	} {
		for _, force := range []bool{false, true} {
			_, err := Create(c.out, force, model)
			if !errors.Is(err, ErrOverlap) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("out %s force %v: %v, want %q", c.out, force, err, c.want)
			}
		}
	}
	if read(t, filepath.Join(model, "config.json")) != "{}" {
		t.Fatal("input touched")
	}
	// A file input: the output may not be it or contain it.
	if _, err := Create(parent, true, filepath.Join(model, "config.json")); !errors.Is(err, ErrOverlap) {
		t.Errorf("folder holding an input file: %v", err)
	}
	d, err := Create(filepath.Join(parent, "model-out"), false, model) // a sibling with a common prefix
	if err != nil {
		t.Fatalf("sibling output refused: %v", err)
	}
	d.Abort()
}

func TestForceExchangesAtomically(t *testing.T) {
	parent := t.TempDir()
	target := filepath.Join(parent, "out")
	for i, content := range []string{"one", "two", "three"} {
		d, err := CreateOwned(target, i > 0, anyFolder)
		if err != nil {
			t.Fatal(err)
		}
		write(t, d, "f", content)
		write(t, d, "only-"+content, "x")
		if err := d.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(target, "f")); got != content {
			t.Fatalf("after commit %d: %q", i, got)
		}
		if got := names(t, parent); len(got) != 1 {
			t.Fatalf("leftovers after commit %d: %v", i, got)
		}
		if got := names(t, target); len(got) != 3 || got[0] != MarkerName {
			t.Fatalf("old files kept: %v", got)
		}
	}
}

// TestRacingForceWriters: several --force writers finishing together leave
// one complete output and nothing else beside it.
func TestRacingForceWriters(t *testing.T) {
	parent := t.TempDir()
	target := filepath.Join(parent, "out")
	d0, _ := Create(target, false)
	write(t, d0, "f", "old")
	d0.Commit()
	const n = 8
	dirs := make([]*Dir, n)
	for i := range dirs {
		d, err := CreateOwned(target, true, anyFolder)
		if err != nil {
			t.Fatal(err)
		}
		write(t, d, "f", "new")
		dirs[i] = d
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, d := range dirs {
		wg.Go(func() { errs[i] = d.Commit() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if got := names(t, parent); len(got) != 1 || read(t, filepath.Join(target, "f")) != "new" {
		t.Fatalf("after the race: %v", got)
	}
}

// TestTwoStepRecovers plays a file system without RENAME_EXCHANGE and a
// crash at each step of the two-step replace: the target is never lost,
// and the next Create completes the replace (or restores the old output)
// and cleans up.
func TestTwoStepRecovers(t *testing.T) {
	saved := renameExchange
	renameExchange = func(a, b string) error { return syscall.EINVAL }
	defer func() { renameExchange, crashAt = saved, nil }()
	for _, c := range []struct {
		step, want string
	}{
		{"", "new"},              // no crash
		{"set old aside", "old"}, // crash before anything moved: old stays
		{"move new in", "new"},   // target missing: the complete new folder moves in
	} {
		parent := t.TempDir()
		target := filepath.Join(parent, "out")
		d, _ := Create(target, false)
		write(t, d, "f", "old")
		d.Commit()
		d, _ = CreateOwned(target, true, anyFolder)
		write(t, d, "f", "new")
		crashed := errors.New("crash")
		crashAt = func(step string) error {
			if step == c.step {
				return crashed
			}
			return nil
		}
		err := d.Commit()
		crashAt = nil
		if c.step == "" && err != nil {
			t.Fatal(err)
		}
		if c.step != "" {
			if !errors.Is(err, crashed) {
				t.Fatalf("%s: %v", c.step, err)
			}
			// The "crashed" process is this one: give its leftovers a dead pid.
			for _, n := range names(t, parent) {
				if n != "out" {
					dead := strings.Replace(n, "-"+itoa(os.Getpid())+"-", "-99999999-", 1)
					os.Rename(filepath.Join(parent, n), filepath.Join(parent, dead))
				}
			}
			next, err := CreateOwned(target, true, anyFolder)
			if err != nil {
				t.Fatal(err)
			}
			next.Abort()
		}
		if got := read(t, filepath.Join(target, "f")); got != c.want {
			t.Errorf("crash at %q: target holds %q, want %q", c.step, got, c.want)
		}
		if got := names(t, parent); len(got) != 1 {
			t.Errorf("crash at %q: leftovers %v", c.step, got)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestModesHonourUmask(t *testing.T) {
	parent := t.TempDir()
	d, _ := Create(filepath.Join(parent, "out"), false)
	write(t, d, "f", "x")
	d.Commit()
	um := Umask()
	st, _ := os.Stat(filepath.Join(parent, "out"))
	if st.Mode().Perm() != 0o777&^um {
		t.Errorf("folder mode %o with umask %o", st.Mode().Perm(), um)
	}
	st, _ = os.Stat(filepath.Join(parent, "out", "f"))
	if st.Mode().Perm() != 0o644&^um {
		t.Errorf("file mode %o with umask %o", st.Mode().Perm(), um)
	}
}
