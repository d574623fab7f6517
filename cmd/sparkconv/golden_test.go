package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
	"sparkconv/kernels"
	"sparkconv/ortrun"
	"sparkconv/outdir"
)

// The sha256 of every file each command writes for the tiny fixture is
// kept in testdata/golden-outputs.json, so any change to any output's
// bytes shows up in review. After an intended change, regenerate with
//
//	go test ./cmd/sparkconv -run TestGoldenOutputs -update
//
// and say in the commit why the bytes changed. To cover a new command or
// option, add a row to goldenRuns (args use MODEL for the tiny fixture,
// OUT for a fresh output path, DIR for a fresh folder the command may
// write files into) and run with -update.
var update = flag.Bool("update", false, "rewrite testdata/golden-outputs.json from this run")

const goldenFile = "../../testdata/golden-outputs.json"

// goldenSamples is the calibrate row's --samples path, which its
// summary.json records as given: the path the goldens were recorded with.
// TestGoldenOutputs runs the commands from $TMP/run/cmd, with the corpus
// (../../corpus/calib.txt) copied to $TMP/fixtures/corpus/calib.txt, so the
// recorded bytes stay the same.
const goldenSamples = "../../fixtures/corpus/calib.txt"

var goldenRuns = []struct {
	name string
	args []string
	// pre run first (PRE: a folder of the row's own, not hashed); a row
	// with ORTLIB in its args runs where ONNX Runtime is found and
	// drops its simulated figures (ONNX Runtime's, per host ISA) by the
	// volatile JSON keys, on top of volatileKeys.
	pre      [][]string
	volatile []string
}{
	{"fixture tiny", []string{"fixture", "--preset", "tiny", "--out", "OUT"}, nil, nil},
	{"fixture tiny untied 2 shards", []string{"fixture", "--preset", "tiny", "--untied", "--shards", "2", "--out", "OUT"}, nil, nil},
	{"w8a8 --rtn", []string{"w8a8", "--rtn", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"w4a16 --rtn --quant-head", []string{"w4a16", "--rtn", "--quant-head", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"gptq --rtn --quant-head", []string{"gptq", "--rtn", "--quant-head", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"gptq --quant-head (calibrated)", []string{"gptq", "--quant-head", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"w4a8-zp --rtn --group 32 --quant-head", []string{"w4a8-zp", "--rtn", "--group", "32", "--quant-head", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"w4a8-zp (calibrated)", []string{"w4a8-zp", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"calibrate", []string{"calibrate", "--model", "MODEL", "--samples", goldenSamples, "--out", "OUT"}, nil, nil},
	{"export-onnx", []string{"export-onnx", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"export-onnx fp16 block", []string{"export-onnx", "--model", "MODEL", "--out", "OUT", "--dtype", "fp16", "--granularity", "block"}, nil, nil},
	{"export-onnx --prefill 16", []string{"export-onnx", "--model", "MODEL", "--out", "OUT", "--prefill", "16"}, nil, nil},
	{"forward --dump", []string{"forward", "--model", "MODEL", "--ids", "1,2,3,4,5", "--dump", "DIR/dump.safetensors"}, nil, nil},
	{"rotate --seed 7", []string{"rotate", "--seed", "7", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"rotate --seed 7 --smooth-down auto", []string{"rotate", "--seed", "7", "--smooth-down", "auto", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"w8a8 --rtn --keep-float 2", []string{"w8a8", "--rtn", "--keep-float", "2", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"gptq --rtn --quant-head --keep-float 2", []string{"gptq", "--rtn", "--quant-head", "--keep-float", "2", "--model", "MODEL", "--out", "OUT"}, nil, nil},
	{"qnn-bundle w8a16", []string{"qnn-bundle", "--model", "MODEL", "--export", "PRE/onnx", "--out", "OUT", "--precision", "w8a16", "--threads", "1", "--force", "--ort-lib", "ORTLIB"},
		[][]string{{"export-onnx", "--model", "MODEL", "--out", "PRE/onnx", "--context", "64"}}, simulatedKeys},
	{"qnn-bundle w4a16-lpbq", []string{"qnn-bundle", "--model", "MODEL", "--export", "PRE/onnx", "--out", "OUT", "--precision", "w4a16-lpbq", "--threads", "1", "--force", "--ort-lib", "ORTLIB"},
		[][]string{{"export-onnx", "--model", "MODEL", "--out", "PRE/onnx", "--context", "64"}}, simulatedKeys},
}

// simulatedKeys are bundle.json's figures from the simulation in ONNX
// Runtime, whose kernels follow the host's ISA.
var simulatedKeys = []string{"simulation", "snr_db", "snr_delta_db", "snr_sequences_db", "snr_worst_sequence_db", "worst_sequence_sample",
	"snr_worst_db", "worst_position", "worst_position_sample", "top1_agree", "forced", "forced_because"}

// volatileKeys are JSON keys whose values differ run to run (timings,
// memory); they are dropped before hashing a .json file.
var volatileKeys = map[string]bool{
	"seconds": true, "total_s": true, "peak_rss_mb": true, "solve_s": true, "timing": true,
	"forward_s": true, "tokens_per_s": true, "mb_per_s": true,
}

// goldenHash hashes a written file. JSON files are hashed after dropping
// volatileKeys and writing the run's temporary paths as $TMP.
func goldenHash(t *testing.T, path, tmp string, volatile ...string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".json") {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		drop := maps.Clone(volatileKeys)
		for _, k := range volatile {
			drop[k] = true
		}
		v = dropVolatile(v, drop)
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte(tmp), []byte("$TMP"))
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func dropVolatile(v any, drop map[string]bool) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if drop[k] {
				delete(x, k)
			} else {
				x[k] = dropVolatile(e, drop)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = dropVolatile(e, drop)
		}
	}
	return v
}

// TestGoldenOutputs runs every row of goldenRuns and compares the sha256
// of each file written with testdata/golden-outputs.json.
func TestGoldenOutputs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every command on the tiny fixture")
	}
	// Outputs that pass through the forward (calibrate, forward --dump)
	// depend on the GEMM tile shapes; the AVX2 family is pinned so an
	// AVX-512 host writes the bytes recorded here.
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		t.Skip("the goldens are recorded with the AVX2 kernels (SPARKCONV_KERNELS=avx2); this CPU has no AVX2+FMA")
	}
	t.Setenv(kernels.EnvKernels, "avx2")
	tmp := t.TempDir()
	golden, err := filepath.Abs(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	corpus, err := os.ReadFile("../../corpus/calib.txt")
	if err != nil {
		t.Fatal(err)
	}
	ortLib, ortErr := ortrun.FindORTLib("") // before the Chdir below
	if ortErr == nil {
		ortLib, _ = filepath.Abs(ortLib)
	}
	wd := filepath.Join(tmp, "run", "cmd")
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wd, filepath.Dir(goldenSamples)), filepath.Base(goldenSamples), string(corpus))
	t.Chdir(wd)
	model := filepath.Join(tmp, "model")
	mustRun(t, "fixture", "--preset", "tiny", "--out", model)
	got := map[string]map[string]string{}
	skipped := map[string]bool{}
	for i, r := range goldenRuns {
		out := filepath.Join(tmp, "out"+string(rune('a'+i)))
		dir := filepath.Join(tmp, "dir"+string(rune('a'+i)))
		os.Mkdir(dir, 0o755)
		pre := filepath.Join(tmp, "pre"+string(rune('a'+i)))
		os.Mkdir(pre, 0o755)
		expand := func(in []string) []string {
			args := make([]string, len(in))
			for k, a := range in {
				a = strings.ReplaceAll(a, "MODEL", model)
				a = strings.ReplaceAll(a, "OUT", out)
				a = strings.ReplaceAll(a, "PRE", pre)
				a = strings.ReplaceAll(a, "ORTLIB", ortLib)
				args[k] = strings.ReplaceAll(a, "DIR", dir)
			}
			return args
		}
		if slices.Contains(r.args, "ORTLIB") && ortErr != nil {
			if os.Getenv("SPARKCONV_REQUIRE_ORT") != "" {
				t.Fatalf("SPARKCONV_REQUIRE_ORT is set: %v", ortErr)
			}
			t.Logf("%s: skipped: %v", r.name, ortErr)
			skipped[r.name] = true
			continue
		}
		for _, p := range r.pre {
			mustRun(t, expand(p)...)
		}
		mustRun(t, expand(r.args)...)
		files := map[string]string{}
		for _, root := range []string{out, dir} {
			filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
				// The output marker, the same bytes in every folder of
				// a command, is checked by TestSavedJSONOwnsNothing.
				if err == nil && !e.IsDir() && e.Name() != outdir.MarkerName {
					rel, _ := filepath.Rel(root, p)
					files[rel] = goldenHash(t, p, tmp, r.volatile...)
				}
				return nil
			})
		}
		if len(files) == 0 {
			t.Errorf("%s wrote no file", r.name)
		}
		got[r.name] = files
	}
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", golden)
		return
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	var want map[string]map[string]string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, ok := got[n]; !ok && !skipped[n] {
			t.Errorf("%s: in the golden file but not in goldenRuns", n)
		}
	}
	for _, r := range goldenRuns {
		if skipped[r.name] {
			continue
		}
		w, g := want[r.name], got[r.name]
		if w == nil {
			t.Errorf("%s: no golden hashes (run with -update)", r.name)
			continue
		}
		for f, h := range g {
			if w[f] == "" {
				t.Errorf("%s: new file %s (run with -update if intended)", r.name, f)
			} else if w[f] != h {
				t.Errorf("%s: %s changed bytes: sha256 %s, golden %s (run with -update if intended, and say why)", r.name, f, h, w[f])
			}
		}
		for f := range w {
			if _, ok := g[f]; !ok {
				t.Errorf("%s: %s is no longer written", r.name, f)
			}
		}
	}
}
