package ortrun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindORTLib(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.so")
	_, err := FindORTLib(missing)
	if err == nil || !strings.Contains(err.Error(), "npm pack onnxruntime-node@1.30.0") || !strings.Contains(err.Error(), "--ort-lib") {
		t.Fatalf("missing --ort-lib: %v", err)
	}
	present := filepath.Join(t.TempDir(), "lib.so")
	os.WriteFile(present, []byte("x"), 0o644)
	t.Setenv(ORTLibEnv, present)
	if got, err := FindORTLib(""); err != nil || got != present {
		t.Fatalf("env: %q %v", got, err)
	}
	t.Setenv(ORTLibEnv, missing)
	if _, err := FindORTLib(""); err == nil || !strings.Contains(err.Error(), ORTLibEnv) {
		t.Fatalf("env missing: %v", err)
	}
}
