package gptq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"sparkconv/convert"
)

// TestMeasureFull measures calibrated gptq layer by layer on a full-size
// checkpoint (SPARKCONV_FULL=DIR, SPARKCONV_FULL_MINUTES=N to stop after N
// minutes): per layer the forward and solve time, per module the held-out
// error of GPTQ and of round to nearest, and the peak RSS so far. It is a
// measurement, not a test; it is skipped without SPARKCONV_FULL.
func TestMeasureFull(t *testing.T) {
	in := os.Getenv("SPARKCONV_FULL")
	if in == "" {
		t.Skip("set SPARKCONV_FULL to a full-size fixture to measure")
	}
	minutes, _ := strconv.Atoi(os.Getenv("SPARKCONV_FULL_MINUTES"))
	if minutes <= 0 {
		minutes = 600
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(minutes)*time.Minute)
	defer cancel()
	c := &Calibrator{Log: os.Stderr, Quiet: true, OnLayer: func(i int, mods []*convert.ModuleReport, fwd, solve time.Duration) {
		line := fmt.Sprintf("layer %2d: forward %6.1fs solve %6.1fs rss %5.0f MB |", i, fwd.Seconds(), solve.Seconds(), convert.PeakRSSMB())
		for k, m := range mods {
			line += fmt.Sprintf(" %s %.4g/%.4g", layerModules[k].name, m.OutErr, m.OutErrRTN)
			if m.Method != "gptq" || m.Note != "" {
				line += "*"
			}
		}
		fmt.Fprintln(os.Stderr, line)
	}}
	o, f := convert.Options{Model: in, Out: filepath.Join(t.TempDir(), "q"), Quiet: true}, convert.W4A8{Group: 128, QuantHead: true}
	start := time.Now()
	r, err := convert.Convert(ctx, o, f, c)
	if err != nil {
		t.Logf("stopped after %v: %v", time.Since(start), err)
		return
	}
	cal := r.Calibration
	t.Logf("total %.1fs (forward %.1fs, solve %.1fs), peak RSS %.0f MB, %d fallbacks", r.Timing.TotalS, cal.ForwardS, cal.SolveS, r.PeakRSSMB, len(cal.Fallbacks))
}

// memProbe reads the resident set from /proc/self/status and the Go heap.
func memProbe(at string) string {
	b, _ := os.ReadFile("/proc/self/status")
	f := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			f[k] = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mb := func(k string) int { n, _ := strconv.Atoi(f[k]); return n / 1024 }
	return fmt.Sprintf("%-18s VmRSS %5d MiB (anon %5d, file %5d) VmHWM %5d MiB | heap in use %5d MiB, alloc %5d MiB, sys %5d MiB, GCs %d", at,
		mb("VmRSS"), mb("RssAnon"), mb("RssFile"), mb("VmHWM"), ms.HeapInuse>>20, ms.HeapAlloc>>20, ms.HeapSys>>20, ms.NumGC)
}

// TestMeasureHead measures the memory of the head's stage on a full-size
// checkpoint (SPARKCONV_FULL=DIR): one layer (down_proj's factor is the
// largest one left over) and then the quantized head, with the resident
// set and the Go heap at each of the head's steps. A measurement, skipped
// without SPARKCONV_FULL; it stops after the solve (the later layers are
// not solved, so the writer refuses).
func TestMeasureHead(t *testing.T) {
	in := os.Getenv("SPARKCONV_FULL")
	if in == "" {
		t.Skip("set SPARKCONV_FULL to a full-size fixture to measure")
	}
	layers, _ := strconv.Atoi(os.Getenv("SPARKCONV_FULL_LAYERS"))
	c := &Calibrator{Log: os.Stderr, Quiet: true, layerLimit: max(1, layers), trace: func(at string) { fmt.Fprintln(os.Stderr, memProbe(at)) },
		OnLayer: func(i int, _ []*convert.ModuleReport, _, _ time.Duration) {
			fmt.Fprintln(os.Stderr, memProbe(fmt.Sprintf("layer %d", i)))
		}}
	o, f := convert.Options{Model: in, Out: filepath.Join(t.TempDir(), "q"), Quiet: true}, convert.W4A8{Group: 128, QuantHead: true}
	_, err := convert.Convert(context.Background(), o, f, c)
	t.Logf("%v; peak RSS %.0f MiB", err, convert.PeakRSSMB())
}

// TestMeasureBudget measures the held-out errors of a few layers deep in a
// full-size checkpoint at a token budget (SPARKCONV_FULL=DIR;
// SPARKCONV_FULL_FROM=L: layers before L run in float, unsolved, to reach
// it; SPARKCONV_FULL_LAYERS=N layers calibrated from there;
// SPARKCONV_FULL_TOKENS=T; SPARKCONV_FULL_SAMPLES=FILE instead of the
// embedded corpus; SPARKCONV_FULL_ACT_ORDER=1: act-order, the default of
// gptq and w4a16; SPARKCONV_FULL_FLOAT_TARGET=A: the float target;
// SPARKCONV_FULL_TRACE=1: the resident set at every step).
// Per layer: forward and solve time, the peak RSS so far, each module's
// held-out error GPTQ/RTN and any retry's note (SPARKCONV_FULL_DAMPS=a,b,..:
// retry at every one of these dampings). A measurement, skipped
// without SPARKCONV_FULL; it stops after the solve (the other layers are
// not solved, so the writer refuses).
func TestMeasureBudget(t *testing.T) {
	in := os.Getenv("SPARKCONV_FULL")
	if in == "" {
		t.Skip("set SPARKCONV_FULL to a full-size fixture to measure")
	}
	env := func(k string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
			return v
		}
		return def
	}
	from := env("SPARKCONV_FULL_FROM", 0)
	c := &Calibrator{Log: os.Stderr, Quiet: true, Budget: env("SPARKCONV_FULL_TOKENS", 0), layerFrom: from, layerLimit: from + env("SPARKCONV_FULL_LAYERS", 1),
		OnLayer: func(i int, mods []*convert.ModuleReport, fwd, solve time.Duration) {
			line := fmt.Sprintf("layer %2d: forward %6.1fs solve %6.1fs rss %5.0f MB |", i, fwd.Seconds(), solve.Seconds(), convert.PeakRSSMB())
			for k, m := range mods {
				line += fmt.Sprintf(" %s %.4g/%.4g", layerModules[k].name, m.OutErr, m.OutErrRTN)
				if m.Method != "gptq" {
					line += "(rtn)"
				}
			}
			fmt.Fprintln(os.Stderr, line)
			for k, m := range mods {
				if m.Note != "" {
					fmt.Fprintf(os.Stderr, "  %s: %s\n", layerModules[k].name, m.Note)
				}
			}
		}}
	if os.Getenv("SPARKCONV_FULL_TRACE") == "1" { // the resident set at every step
		c.trace = func(at string) { fmt.Fprintln(os.Stderr, memProbe(at)) }
	}
	if a, err := strconv.ParseFloat(os.Getenv("SPARKCONV_FULL_FLOAT_TARGET"), 64); err == nil {
		c.FloatTarget = a
	}
	if d := os.Getenv("SPARKCONV_FULL_DAMPS"); d != "" { // every one tried
		defer func(old []float64) { RetryDamps = old }(RetryDamps)
		RetryDamps = nil
		for _, f := range strings.Split(d, ",") {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatal(err)
			}
			RetryDamps = append(RetryDamps, v)
		}
		c.retryAll = true
	}
	if f := os.Getenv("SPARKCONV_FULL_SAMPLES"); f != "" {
		c.Files = []string{f}
	}
	c.ActOrder = os.Getenv("SPARKCONV_FULL_ACT_ORDER") == "1" // gptq's and w4a16's default
	o, f := convert.Options{Model: in, Out: filepath.Join(t.TempDir(), "q"), Quiet: true}, convert.W4A8{Group: 128}
	start := time.Now()
	_, err := convert.Convert(context.Background(), o, f, c)
	t.Logf("%v after %v; peak RSS %.0f MiB", err, time.Since(start), convert.PeakRSSMB())
}
