package convert

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/infile"
	"sparkconv/outdir"
)

// TestInputReadOnce: the config and tokenizer files written into the
// output are the ones read when the job started, even when the model
// folder is replaced (a new config.json and tokenizer.json) mid-run; a
// shard rewritten in place fails the commit, naming it, and writes nothing.
func TestInputReadOnce(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	origTok, _ := os.ReadFile(filepath.Join(in, "tokenizer.json"))
	out := filepath.Join(t.TempDir(), "out")
	j, err := Start(context.Background(), Options{Model: in, Out: out}, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	// Another checkpoint lands in the folder by rename, as a download tool does.
	for _, f := range []string{"config.json", "tokenizer.json"} {
		os.WriteFile(filepath.Join(in, f+".new"), []byte(`{"replaced": true}`), 0o644)
		os.Rename(filepath.Join(in, f+".new"), filepath.Join(in, f))
	}
	if err := j.CopyAux(); err != nil {
		t.Fatal(err)
	}
	if err := j.WriteConfig(map[string]any{"added": 1}); err != nil {
		t.Fatal(err)
	}
	gotTok, _ := os.ReadFile(j.Dir.Join("tokenizer.json"))
	gotCfg, _ := os.ReadFile(j.Dir.Join("config.json"))
	if string(gotTok) != string(origTok) {
		t.Error("tokenizer.json of the replaced folder was copied")
	}
	if strings.Contains(string(gotCfg), "replaced") || !strings.Contains(string(gotCfg), `"added": 1`) || !strings.Contains(string(gotCfg), `"vocab_size"`) {
		t.Errorf("config.json written from the replaced folder:\n%s", gotCfg)
	}
	// A shard rewritten in place (same inode) is seen at commit.
	shard := filepath.Join(in, "model.safetensors")
	f, _ := os.OpenFile(shard, os.O_RDWR|os.O_APPEND, 0)
	f.Write([]byte{0})
	f.Close()
	if err := j.Commit(); !errors.Is(err, infile.ErrChanged) || !strings.Contains(err.Error(), shard) {
		t.Fatalf("commit after the shard changed: %v", err)
	}
	j.Close()
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("output written from a changed input")
	}
}

// TestOutputOverlappingInputRefused: --out that is the model folder,
// inside it or above it is refused, --force or not, and the model is
// untouched.
func TestOutputOverlappingInputRefused(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	for _, out := range []string{in, filepath.Join(in, "w8a8"), filepath.Dir(in)} {
		for _, force := range []bool{false, true} {
			_, err := Convert(context.Background(), Options{Model: in, Out: out, Force: force}, W8A8{}, nil)
			if !errors.Is(err, outdir.ErrOverlap) {
				t.Errorf("--out %s --force=%v: %v", out, force, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(in, "model.safetensors")); err != nil {
		t.Fatal("input lost")
	}
}
