package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sparkconv/gptq"
)

// TestEveryFlagChecked walks every flag of every command found in the
// cobra tree, so a flag added later is covered without editing this test:
//   - the flag must declare what it accepts (intIn, oneOf, sizeIn,
//     freeForm, checkedBy... in flagcheck.go, right after it is defined);
//   - its default must be acceptable (unless the rule says .unset());
//   - every value its rule lists as bad (zero, negative, NaN, inf, too
//     large, empty, an unknown word) run through the real binary must exit
//     2 naming the flag and what it accepts, before any work (no --model
//     is given, so any work would fail differently);
//   - a boolean flag given a non-boolean value exits 2.
func TestEveryFlagChecked(t *testing.T) {
	rootCmd.InitDefaultCompletionCmd()
	type probe struct {
		args       []string
		flag, want string
	}
	var probes []probe
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		var pos []string
		if c.Args != nil && c.Args(c, nil) != nil {
			pos = []string{"x.onnx"} // a command that needs a positional argument
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Value.Type() == "bool" {
				probes = append(probes, probe{append(append(append([]string{}, path...), pos...), "--"+f.Name+"=maybe"), f.Name, "true or false"})
				return
			}
			r := flagRules[f]
			if r == nil {
				t.Errorf("%s --%s declares no rule: add intIn/oneOf/sizeIn/freeForm/checkedBy (flagcheck.go) after defining it", c.CommandPath(), f.Name)
				return
			}
			if !r.isUnset {
				if err := r.check(f.DefValue); err != nil {
					t.Errorf("%s --%s: default %q is refused by its own rule (%v)", c.CommandPath(), f.Name, f.DefValue, err)
				}
			}
			for _, bad := range r.bad {
				if r.check(bad) == nil {
					t.Errorf("%s --%s: rule accepts its own bad value %q", c.CommandPath(), f.Name, bad)
				}
				probes = append(probes, probe{append(append(append([]string{}, path...), pos...), "--"+f.Name+"="+bad), f.Name, r.want})
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(rootCmd)
	if len(probes) < 100 {
		t.Fatalf("only %d probes: the walk missed commands", len(probes))
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, p := range probes {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, errOut, code := run(t, p.args...)
			if code != 2 || !strings.Contains(errOut, "--"+p.flag) || !strings.Contains(errOut, p.want) {
				t.Errorf("sparkconv %s: exit %d, stderr %q; want exit 2 naming --%s and %q", strings.Join(p.args, " "), code, errOut, p.flag, p.want)
			}
		})
	}
	wg.Wait()
	t.Logf("%d bad values refused", len(probes))
}

// TestUsageExitCodes: unknown commands, extra arguments, unknown flags and
// input-dependent bounds exit 2 before any work; --version works.
func TestUsageExitCodes(t *testing.T) {
	m := tinyModel(t)
	short := filepath.Join(t.TempDir(), "short") // max_position_embeddings 1024
	copyDir(t, m, short)
	editConfig(t, short, func(c map[string]any) { c["max_position_embeddings"] = 1024 })
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"w8a8", "extra"}, "takes no arguments"},
		{[]string{"inspect", "--model", m, "extra"}, "takes no arguments"},
		{[]string{"w8a8", "--nope"}, "unknown flag"},
		{[]string{"export-onnx", "--model", short, "--out", "/nonexistent/o", "--context", "2000"}, "--context 2000: want an integer in [2, 1024] (config.json max_position_embeddings)"},
		{[]string{"fixture", "--out", "/nonexistent/o", "--shards", "1000"}, "[1, 34]"},
		{[]string{"forward", "--model", m, "--ids", "1", "--top-k", "100000"}, "vocab_size"},
		{[]string{"export-onnx", "--model", m, "--out", "/nonexistent/o", "--layers", "0-9"}, "--layers"},
	} {
		_, errOut, code := run(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("sparkconv %s: exit %d: %s", strings.Join(c.args, " "), code, errOut)
		}
	}
	if out := mustRun(t, "--version"); out != "sparkconv "+version+"\n" {
		t.Errorf("--version: %q", out)
	}
}

// TestCalibrationDefaults: act-order and the refit default on for the
// 4-bit formats and off for w8a8, where the refit measured no better
// (docs/calibration.md#weighted-search-and-refit); the float target's
// weight is each grid's own (docs/calibration.md#float-target-on-the-symmetric-grid).
func TestCalibrationDefaults(t *testing.T) {
	for _, c := range []struct {
		cmd, actOrder, refit, floatTarget string
	}{
		{"gptq", "true", strconv.Itoa(gptq.DefaultRefit), "0.33"},
		{"w4a16", "true", strconv.Itoa(gptq.DefaultRefit), "0.25"},
		{"w4a8-zp", "true", strconv.Itoa(gptq.DefaultRefit), "0.33"},
		{"w8a8", "false", "0", "0"},
	} {
		cmd, _, err := rootCmd.Find([]string{c.cmd})
		if err != nil {
			t.Fatal(err)
		}
		if got := cmd.Flags().Lookup("act-order").DefValue; got != c.actOrder {
			t.Errorf("%s --act-order defaults to %s, want %s", c.cmd, got, c.actOrder)
		}
		if got := cmd.Flags().Lookup("refit").DefValue; got != c.refit {
			t.Errorf("%s --refit defaults to %s, want %s", c.cmd, got, c.refit)
		}
		if got := cmd.Flags().Lookup("float-target").DefValue; got != c.floatTarget {
			t.Errorf("%s --float-target defaults to %s, want %s", c.cmd, got, c.floatTarget)
		}
	}
}
