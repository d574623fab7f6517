package main

// One mechanism checks every flag value before a command does any work.
// Each flag declares what it accepts right after it is defined:
//
//	intIn(cmd, "steps", 1, 1<<20)          an integer in [lo, hi]
//	floatIn(cmd, "eps", 0, 1)              a finite number in [lo, hi]
//	oneOf(cmd, "dtype", "fp32", "fp16")    one of the listed words
//	sizeIn(cmd, "max-shard-size", 1, 1e15) a byte count with a unit, or 0
//	freeForm(cmd, "model")                 a path or text: any value but ""
//	checkedBy(cmd, "layers", desc, fn, bad...) a parser of its own
//
// and .unset() on the rule when the default is a "not given" marker
// outside the range (verify --steps: absent means sliding_window + 8; 0 is
// refused). A value out of range (zero, negative, NaN, inf, too large, an
// unknown word) exits 2 naming the flag and what it accepts; nothing is
// ever replaced by a default. Bounds that depend on the input (--context
// against max_position_embeddings) are checked with checkIn once the input
// is read, with the same message. TestEveryFlagChecked walks every flag of
// every command from the cobra tree: a flag without a rule fails it.

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sparkconv/outdir"
)

// flagRule is what one flag accepts.
type flagRule struct {
	want    string             // "an integer in [1, 1048576]"
	check   func(string) error // nil when the value is acceptable
	bad     []string           // values the walk test expects to be refused
	isUnset bool               // the default means "not given" and may lie outside
	path    bool               // the value is a path (or text, read as one)
}

// unset marks the flag's default as a "not given" marker.
func (r *flagRule) unset() *flagRule { r.isUnset = true; return r }

// why adds the reason for the rule's bounds to what it says it wants.
func (r *flagRule) why(reason string) *flagRule {
	r.want += " (" + reason + ")"
	return r
}

var flagRules = map[*pflag.Flag]*flagRule{}

func addRule(cmd *cobra.Command, name string, r *flagRule) *flagRule {
	f := cmd.Flags().Lookup(name)
	if f == nil {
		panic(fmt.Sprintf("%s: no flag --%s to declare a rule for", cmd.CommandPath(), name))
	}
	flagRules[f] = r
	return r
}

// intIn declares an integer flag accepting [lo, hi].
func intIn(cmd *cobra.Command, name string, lo, hi int64) *flagRule {
	r := &flagRule{want: fmt.Sprintf("an integer in [%d, %d]", lo, hi)}
	r.check = func(s string) error {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < lo || v > hi {
			return errors.New(r.want) // read when called: why() may extend it
		}
		return nil
	}
	r.bad = []string{"NaN", "inf", "-inf", "1e30", "1.5", "", "99999999999999999999", strconv.FormatInt(hi, 10) + "0"}
	if lo > math.MinInt64 {
		r.bad = append(r.bad, strconv.FormatInt(lo-1, 10))
	}
	if hi < math.MaxInt64 {
		r.bad = append(r.bad, strconv.FormatInt(hi+1, 10))
	}
	return addRule(cmd, name, r)
}

// uintAny declares an unsigned 64-bit flag (a seed): any value fits.
func uintAny(cmd *cobra.Command, name string) *flagRule {
	r := &flagRule{want: "an integer in [0, 18446744073709551615]"}
	r.check = func(s string) error {
		if _, err := strconv.ParseUint(s, 10, 64); err != nil {
			return errors.New(r.want)
		}
		return nil
	}
	r.bad = []string{"-1", "NaN", "inf", "1e30", "1.5", "", "18446744073709551616"}
	return addRule(cmd, name, r)
}

// floatIn declares a float flag accepting finite values in [lo, hi].
func floatIn(cmd *cobra.Command, name string, lo, hi float64) *flagRule {
	r := &flagRule{want: fmt.Sprintf("a number in [%g, %g]", lo, hi)}
	r.check = func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
			return errors.New(r.want)
		}
		return nil
	}
	r.bad = []string{"NaN", "inf", "-inf", "", "x", strconv.FormatFloat(hi*2+1, 'g', -1, 64), strconv.FormatFloat(lo-1-math.Abs(lo), 'g', -1, 64)}
	return addRule(cmd, name, r)
}

// oneOf declares a flag accepting exactly the listed words.
func oneOf(cmd *cobra.Command, name string, values ...string) *flagRule {
	r := &flagRule{want: "one of " + strings.Join(values, ", ")}
	r.check = func(s string) error {
		for _, v := range values {
			if s == v {
				return nil
			}
		}
		return errors.New(r.want)
	}
	r.bad = []string{"bogus", "", " " + values[0], strings.ToUpper(values[0]) + "X", "NaN", "-1"}
	return addRule(cmd, name, r)
}

// sizeIn declares a byte-count flag (KB, MB, GB, KiB, MiB, GiB units):
// 0 or a whole number of bytes in [lo, hi].
func sizeIn(cmd *cobra.Command, name string, lo, hi int64) *flagRule {
	r := &flagRule{want: fmt.Sprintf("0 (no limit) or a whole number of bytes from %s to %s, e.g. 2GB, 500MB, 512MiB", humanBytes(lo), humanBytes(hi))}
	r.check = func(s string) error {
		v, err := parseSize(s)
		if err != nil || (v != 0 && (v < lo || v > hi)) {
			return errors.New(r.want)
		}
		return nil
	}
	r.bad = []string{"NaN", "inf", "-inf", "1e30", "1e-7", "-1", "-1MB", "5XB", "", "0.5"}
	return addRule(cmd, name, r)
}

func humanBytes(n int64) string {
	for _, u := range []struct {
		s string
		n int64
	}{{"PB", 1e15}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.s)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// freeForm declares a flag whose value is a path or text: anything but
// the empty value, which would otherwise silently mean the default
// (--eval= running nothing, --samples ” the built-in text).
func freeForm(cmd *cobra.Command, names ...string) {
	for _, n := range names {
		r := &flagRule{want: "a path or text, not empty (leave the flag out for its default)", bad: []string{""}, isUnset: true, path: true}
		r.check = func(s string) error {
			if s == "" {
				return errors.New(r.want)
			}
			return nil
		}
		addRule(cmd, n, r)
	}
}

// onlyWith refuses any of flags given when what it applies to (need) is
// not in use: its value would be accepted and never read (a missing file
// included).
func onlyWith(cmd *cobra.Command, inUse bool, need string, flags ...string) error {
	if inUse {
		return nil
	}
	for _, f := range flags {
		if cmd.Flags().Changed(f) {
			return usagef("--%s applies only with %s; without it the value would be ignored", f, need)
		}
	}
	return nil
}

// checkedBy declares a flag checked by its own parser; bad lists values
// it must refuse.
func checkedBy(cmd *cobra.Command, name, want string, check func(string) error, bad ...string) *flagRule {
	r := &flagRule{want: want, bad: bad}
	r.check = func(s string) error {
		if err := check(s); err != nil {
			return fmt.Errorf("%s (%v)", want, err)
		}
		return nil
	}
	return addRule(cmd, name, r)
}

// flagValue is the value as given, for messages (a list flag's items).
func flagValue(f *pflag.Flag) []string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return sv.GetSlice()
	}
	return []string{f.Value.String()}
}

// checkFlags checks every flag given on the command line.
func checkFlags(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		r := flagRules[f]
		if r == nil || !f.Changed {
			return
		}
		for _, v := range flagValue(f) {
			if err := r.check(v); err != nil {
				errs = append(errs, fmt.Errorf("--%s %s: want %v", f.Name, showValue(v), err))
			}
		}
	})
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	return nil
}

// showValue prints a flag value as given, quoted when it is empty or holds
// spaces or quotes.
func showValue(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\"'") {
		return strconv.Quote(v)
	}
	return v
}

// checkIn refuses v outside [lo, hi] for a bound known only once the input
// is read, in the same words as the flag rules.
func checkIn(flag string, v, lo, hi int64, why string) error {
	if v < lo || v > hi {
		return usagef("--%s %d: want an integer in [%d, %d] (%s)", flag, v, lo, hi, why)
	}
	return nil
}

var pflagInvalid = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?--([^"]+)" flag`)

// flagError turns pflag's parse errors into the same messages as the
// rules (with the accepted range), exiting 2.
func flagError(cmd *cobra.Command, err error) error {
	if m := pflagInvalid.FindStringSubmatch(err.Error()); m != nil {
		if f := cmd.Flags().Lookup(m[2]); f != nil {
			if r := flagRules[f]; r != nil {
				return usagef("--%s %s: want %s", m[2], showValue(m[1]), r.want)
			}
			if f.Value.Type() == "bool" {
				return usagef("--%s %s: want true or false (or the flag alone)", m[2], showValue(m[1]))
			}
		}
	}
	return usageError{err}
}

// prepare wires the checks into the command tree: flag rules before any
// command runs, usage errors (exit 2) for bad arguments and flags.
func prepare(root *cobra.Command) {
	root.SetFlagErrorFunc(flagError)
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		outdir.SetCommand(cmd.Name()) // the output marker names the command
		if err := checkFlags(cmd); err != nil {
			return err
		}
		return profile.start(pathFlags(cmd, args))
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Args != nil {
			args := c.Args
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					var ue usageError
					switch {
					case errors.As(err, &ue):
						return err
					case strings.HasPrefix(err.Error(), "unknown command ") && !cmd.HasSubCommands():
						return usagef("%s takes no arguments, got %q (flags start with --)", cmd.CommandPath(), strings.Join(a, " "))
					}
					return usageError{err}
				}
				return nil
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

// intWords writes each value as a flag word (for oneOf).
func intWords(values []int) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = strconv.Itoa(v)
	}
	return out
}
