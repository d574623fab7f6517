// Package progress draws progress bars on stderr for long work, only when
// stderr is a terminal, and prints one plain summary line for logs.
package progress

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Bar counts units of work (bytes, tensors, samples). The zero value is
// not usable; call New. A nil *Bar is a silent bar.
type Bar struct {
	bar   *progressbar.ProgressBar
	desc  string
	start time.Time
	log   io.Writer
}

// Visible says whether bars are drawn (stderr is a terminal); long work
// that runs without one can print plain lines instead.
func Visible() bool { return term.IsTerminal(int(os.Stderr.Fd())) }

// New starts a bar over total units described by desc. bytes selects byte
// formatting. The bar is drawn only when stderr is a terminal.
func New(total int64, desc string, bytes bool) *Bar {
	visible := Visible()
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetVisibility(visible),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionShowCount(),
	}
	if bytes {
		opts = append(opts, progressbar.OptionShowBytes(true))
	}
	return &Bar{bar: progressbar.NewOptions64(total, opts...), desc: desc, start: time.Now(), log: os.Stderr}
}

// Add advances the bar by n units.
func (b *Bar) Add(n int64) {
	if b != nil {
		_ = b.bar.Add64(n)
	}
}

// Describe changes the text shown beside the bar (e.g. the tensor name).
func (b *Bar) Describe(s string) {
	if b != nil {
		b.bar.Describe(s)
	}
}

// Done clears the bar and prints one summary line with the elapsed time.
// quiet suppresses the line (for --json runs that keep stderr clean).
func (b *Bar) Done(quiet bool) {
	if b == nil {
		return
	}
	_ = b.bar.Finish()
	if !quiet {
		fmt.Fprintf(b.log, "%s: done in %.1fs\n", b.desc, time.Since(b.start).Seconds())
	}
}
