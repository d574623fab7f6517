// Command sparkconv converts Spark-X2.5 checkpoints into what edge runtimes
// load (GPTQ W4A8, tinygemm W4A16, compressed-tensors W8A8, ONNX decode
// steps) and proves that what it wrote is faithful.
//
// Each subcommand lives in its own file and registers itself on rootCmd in
// an init function; this file holds only the root and the shared plumbing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sparkconv/kernels"
	"sparkconv/outdir"
	"sparkconv/safetensors"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// jsonOut is the global --json flag: machine-readable summary on stdout.
var jsonOut bool

var rootCmd = &cobra.Command{
	Use:           "sparkconv",
	Short:         "Convert Spark-X2.5 checkpoints for edge runtimes and prove the result faithful",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func init() {
	rootCmd.PersistentFlags().BoolVar(&jsonOut, "json", false, "print a machine-readable JSON document on stdout (human text goes to stderr)")
	rootCmd.Version = version
	rootCmd.SetOut(stdout)
	rootCmd.SetVersionTemplate("sparkconv {{.Version}}\n")
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the sparkconv version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if jsonOut {
				return printJSON(map[string]string{"version": version})
			}
			fmt.Fprintln(cmd.OutOrStdout(), "sparkconv", version)
			return nil
		},
	})
}

// stdout is where commands print their results: os.Stdout, keeping its
// first write error (a full device, a closed pipe), which main reports
// instead of exiting 0 with the output cut short.
var stdout = &errWriter{w: os.Stdout}

// printJSON writes v as indented JSON on stdout.
func printJSON(v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSONOr prints rep as JSON with --json, else its human form with
// text: for commands whose verdict (an error exit) follows the printed
// report.
func printJSONOr(rep any, text func()) error {
	if jsonOut {
		return printJSON(rep)
	}
	text()
	return nil
}

// usageError marks errors in how the command was called (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns an error that exits with status 2.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// reportedError marks a failure whose JSON report the command has already
// printed on stdout: main then writes the error to stderr only, so stdout
// stays one JSON document.
type reportedError struct{ err error }

func (e reportedError) Error() string { return e.err.Error() }
func (e reportedError) Unwrap() error { return e.err }

// reported wraps err (nil stays nil) as already reported.
func reported(err error) error {
	if err == nil {
		return nil
	}
	return reportedError{err}
}

// exitCode maps an error to the process exit status: 0 success, 2 usage,
// 130 interrupted, 1 everything else.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		return 130
	case errors.As(err, &ue), errors.Is(err, outdir.ErrOverlap):
		return 2
	default:
		return 1
	}
}

// interruptGrace is how long a command may take to stop cleanly after
// SIGINT/SIGTERM (writers check the context between tensors and remove
// their temporary output) before the process exits anyway.
const interruptGrace = 5 * time.Second

// handleSignals makes every command stop the same way at SIGINT/SIGTERM:
// no output is moved into place after the signal (outdir.Interrupt), the
// context is cancelled, and after interruptGrace or at a second signal
// the process removes its temporary files and folders and exits 130.
func handleSignals() context.Context {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sigs
		outdir.Interrupt()
		cancel()
		select {
		case <-sigs:
		case <-time.After(interruptGrace):
		}
		outdir.AbortWriting() // a command still computing left its temporary output
		fmt.Fprintln(os.Stderr, "sparkconv: interrupted")
		os.Exit(130)
	}()
	return ctx
}

func main() {
	ctx := handleSignals()
	prepare(rootCmd)
	// A fault on a memory-mapped input that shrank becomes an error naming
	// the file (on this goroutine; the readers' workers guard their own).
	// A SPARKCONV_KERNELS value naming no kernel family is a usage error.
	err := kernels.EnvError()
	if err != nil {
		err = usageError{err}
	} else {
		err = safetensors.Guard(func() error { return rootCmd.ExecuteContext(ctx) })
		if perr := profile.stop(ctx.Err() == nil); err == nil {
			err = perr
		}
		if err == nil && stdout.err != nil {
			err = fmt.Errorf("writing the output to stdout: %w", stdout.err)
		}
		err = classify(ctx, err)
	}
	if err != nil {
		var re reportedError
		if jsonOut && !errors.As(err, &re) {
			_ = printJSON(map[string]string{"error": err.Error()})
		}
		fmt.Fprintln(os.Stderr, "sparkconv:", err)
	}
	os.Exit(exitCode(err))
}

// errInterrupted replaces whatever a command returned after SIGINT/SIGTERM
// (often "context canceled" naming a temporary file already removed).
var errInterrupted error = interrupted{}

type interrupted struct{}

func (interrupted) Error() string { return "interrupted" }
func (interrupted) Unwrap() error { return context.Canceled }

// classify maps cobra's own errors and interruptions to what main reports.
func classify(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		return errInterrupted // nothing was moved into place after the signal
	case err == nil:
		return nil
	case strings.HasPrefix(err.Error(), "unknown command "):
		return usageError{err} // cobra's error for an unknown subcommand
	}
	return err
}

// envCPUProfile names the environment variable that writes a CPU profile
// of the whole command to the file it names (for `go tool pprof`; the
// calibrated conversions label their phases, see gptq/phase.go). The file
// is an output like any other (outdir.File): it must not exist, may not
// be, lie inside or contain any path the command is given, and is written
// under a temporary name and moved into place only when complete.
const envCPUProfile = "SPARKCONV_CPUPROFILE"

// profile is the CPU profile being written (nil file: none).
var profile cpuProfile

type cpuProfile struct {
	file *outdir.Pending
	w    *errWriter
}

// start starts the profile envCPUProfile asks for, once the command's
// flags are known: paths are every path the command was given.
func (p *cpuProfile) start(paths []string) error {
	path := os.Getenv(envCPUProfile)
	if path == "" {
		return nil
	}
	out, err := outdir.NewFile(path, false, nil, paths...)
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", envCPUProfile, err)}
	}
	if p.file, err = out.Begin(); err != nil {
		return usageError{fmt.Errorf("%s: %w", envCPUProfile, err)}
	}
	p.w = &errWriter{w: p.file.File()}
	if err := pprof.StartCPUProfile(p.w); err != nil {
		p.file.Abort()
		p.file = nil
		return usageError{fmt.Errorf("%s=%s: %w", envCPUProfile, path, err)}
	}
	return nil
}

// stop ends the profile and moves it into place when ok (the command was
// not interrupted) and every byte was written; else it removes it. A
// write error (a full disk) is the command's error.
func (p *cpuProfile) stop(ok bool) error {
	if p.file == nil {
		return nil
	}
	pprof.StopCPUProfile()
	if p.w.err != nil || !ok {
		p.file.Abort()
		if p.w.err != nil {
			return fmt.Errorf("%s: writing the profile: %w; no profile written", envCPUProfile, p.w.err)
		}
		return nil
	}
	if err := p.file.Commit(); err != nil {
		return fmt.Errorf("%s: %w", envCPUProfile, err)
	}
	return nil
}

// errWriter keeps the first write error (runtime/pprof drops them).
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	if err != nil {
		e.err = err
	}
	return n, err
}

// pathFlags are the values of every path or text flag given to cmd, and
// its arguments: what an output the command is not told about (the CPU
// profile) may not overlap.
func pathFlags(cmd *cobra.Command, args []string) []string {
	paths := append([]string(nil), args...)
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if r := flagRules[f]; r != nil && r.path {
			paths = append(paths, flagValue(f)...)
		}
	})
	return paths
}
