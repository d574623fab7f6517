package outdir

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// anyFolder accepts every folder: for the tests of the replace itself.
func anyFolder(string) error { return nil }

// TestForceReplacesOnlyOwn: --force replaces a folder Commit marked and
// refuses, by name, a plain file, a symbolic link, a folder without the
// marker (whatever JSON it holds: a saved --json document names sparkconv
// too), a folder whose marker is a link or not a marker, and a fixture
// (for every command but fixture's own); the refused one is left as it
// was.
func TestForceReplacesOnlyOwn(t *testing.T) {
	committed := func(command string) func(p string) {
		return func(p string) {
			SetCommand(command)
			defer SetCommand("sparkconv")
			d, err := Create(p, false)
			if err != nil {
				t.Fatal(err)
			}
			write(t, d, "report.json", `{"tool": "sparkconv"}`)
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	noMarker := "holds no " + MarkerName + " marker"
	for _, c := range []struct {
		name, refusal string
		owner         Owner
		make          func(p string)
	}{
		{"build", "", SparkconvFolder, committed("w8a8")},
		{"export", "", SparkconvFolder, committed("export-onnx")},
		{"fixture by fixture", "", FolderOf(FixtureCommand), committed(FixtureCommand)},
		{"fixture by a build", "makes it a fixture", SparkconvFolder, committed(FixtureCommand)},
		{"build by fixture", "names the w8a8 command, not fixture", FolderOf(FixtureCommand), committed("w8a8")},
		{"plain file", "is a file, not a folder", SparkconvFolder, func(p string) { os.WriteFile(p, []byte("mine"), 0o644) }},
		{"symlink", "is a symbolic link", SparkconvFolder, func(p string) { os.Symlink(os.TempDir(), p) }},
		{"foreign folder", noMarker, SparkconvFolder, func(p string) { mk(t, p, "config.json", `{"model_type": "spark2_5"}`) }},
		{"saved --json", noMarker, SparkconvFolder, func(p string) {
			mk(t, p, "result.json", `{"tool": "sparkconv", "scheme": "w8a8"}`)
			mk(t, p, "notes.txt", "mine")
		}},
		{"marker link", "is not a marker sparkconv writes", SparkconvFolder, func(p string) {
			committed("w8a8")(p + "-real")
			mk(t, p, "notes.txt", "mine")
			os.Symlink(filepath.Join(p+"-real", MarkerName), filepath.Join(p, MarkerName))
		}},
		{"not a marker", "is not a marker sparkconv writes", SparkconvFolder, func(p string) { mk(t, p, MarkerName, `{"tool": "sparkconv"}`) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "out")
			c.make(target)
			before := names(t, filepath.Dir(target))
			d, err := CreateOwned(target, true, c.owner)
			if c.refusal == "" {
				if err != nil {
					t.Fatal(err)
				}
				write(t, d, "f", "new")
				if err := d.Commit(); err != nil {
					t.Fatal(err)
				}
				if read(t, filepath.Join(target, "f")) != "new" {
					t.Error("not replaced")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.refusal) || !strings.Contains(err.Error(), target) {
				t.Fatalf("want a refusal naming %s (%q), got %v", target, c.refusal, err)
			}
			if got := names(t, filepath.Dir(target)); len(got) != len(before) {
				t.Errorf("left beside it: %v", got)
			}
		})
	}
}

// TestMarker: Commit writes one marker per folder, naming the command,
// the same bytes every time.
func TestMarker(t *testing.T) {
	SetCommand("calibrate")
	defer SetCommand("sparkconv")
	var all []string
	for _, name := range []string{"a", "b"} {
		d, err := Create(filepath.Join(t.TempDir(), name), false)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Commit(); err != nil {
			t.Fatal(err)
		}
		m, err := readMarker(d.Target())
		if err != nil || m.Command != "calibrate" || m.Format != markerFormat {
			t.Fatalf("marker %+v, %v", m, err)
		}
		all = append(all, read(t, filepath.Join(d.Target(), MarkerName)))
	}
	if all[0] != all[1] || all[0] != `{"format":"sparkconv-output/1","command":"calibrate"}`+"\n" {
		t.Errorf("markers %q", all)
	}
}

func mk(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFile: an output file is refused when it is an input or lies inside
// one, exists without force, or (with force) is a folder or a file its
// Owner does not recognise; with force an owned file is replaced
// atomically, and a failing write leaves the old file and nothing else.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	mk(t, model, "model.safetensors", "weights")
	own := func(p string) error {
		if b, _ := os.ReadFile(p); !strings.HasPrefix(string(b), "OURS") {
			return os.ErrInvalid
		}
		return nil
	}
	out := filepath.Join(dir, "out.bin")
	for _, c := range []struct {
		target string
		force  bool
		want   string
	}{
		{filepath.Join(model, "model.safetensors"), true, "lies inside the input"},
		{filepath.Join(model, "model.safetensors"), false, "lies inside the input"},
		{filepath.Join(model, "new.bin"), true, "lies inside the input"},
		{model, true, "is the input"},
		{dir, true, "contains the input"},
		{filepath.Join(dir, "missing", "x"), false, "output parent folder"},
	} {
		if _, err := NewFile(c.target, c.force, own, model); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want %q, got %v", c.target, c.want, err)
		}
	}
	f, err := NewFile(out, false, own, model)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteBytes([]byte("OURS 1")); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFile(out, false, own, model); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("existing without force: %v", err)
	}
	f, err = NewFile(out, true, own, model)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(func(w *os.File) error { w.Write([]byte("OURS 2 partial")); return os.ErrClosed }); err == nil {
		t.Error("a failing fill succeeded")
	}
	if got := read(t, out); got != "OURS 1" {
		t.Errorf("after a failed write: %q", got)
	}
	if err := f.WriteBytes([]byte("OURS 2")); err != nil || read(t, out) != "OURS 2" {
		t.Errorf("force replace: %v, %q", err, read(t, out))
	}
	foreign := filepath.Join(dir, "foreign.txt")
	os.WriteFile(foreign, []byte("user's notes"), 0o644)
	if _, err := NewFile(foreign, true, own, model); err == nil || !strings.Contains(err.Error(), "not written by sparkconv") || !strings.Contains(err.Error(), foreign) {
		t.Errorf("force over a foreign file: %v", err)
	}
	if _, err := NewFile(model, true, own); err == nil || !strings.Contains(err.Error(), "a folder, not a file") {
		t.Errorf("force over a folder: %v", err)
	}
	if got := names(t, dir); len(got) != 3 {
		t.Errorf("left behind: %v", got)
	}
}

// TestFileCleansStaleTemporaries: the temporary file a killed File.Write
// left beside its target is removed by the next NewFile of that target;
// one of a live process is kept.
func TestFileCleansStaleTemporaries(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "r.html")
	dead := filepath.Join(dir, ".r.html"+tmpTag+"2147483646-1")
	live := filepath.Join(dir, ".r.html"+tmpTag+strconv.Itoa(os.Getppid())+"-1")
	os.WriteFile(dead, []byte("half"), 0o644)
	os.WriteFile(live, []byte("half"), 0o644)
	if _, err := NewFile(target, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Error("a dead run's temporary file is still there")
	}
	if _, err := os.Stat(live); err != nil {
		t.Error("a live process's temporary file was removed")
	}
}
