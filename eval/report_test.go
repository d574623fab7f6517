package eval

import (
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"context"

	"sparkconv/convert"
	"sparkconv/fixtures/fixturestest"
)

// tinyResult evaluates a W4A16 build of the tiny model on two windows.
func tinyResult(t *testing.T) (*Result, string) {
	t.Helper()
	dir := fixturestest.Tiny(t, false)
	q := filepath.Join(t.TempDir(), "w4a16")
	if _, err := convert.Convert(context.Background(), convert.Options{Model: dir, Out: q, Quiet: true}, convert.W4A16{Group: 32}, nil); err != nil {
		t.Fatal(err)
	}
	text := tinyText(t, dir)
	text.Stream = text.Stream[:4*128]
	opt := Settings{Ctx: 128, Prompts: 3, GenTokens: 8}
	b, done, err := EnsureBase("", func() (Model, func(), error) { m, c := openModel(t, dir); return m, c, nil }, text, opt, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	m, closeM := openModel(t, q)
	defer closeM()
	r, err := Evaluate(b, m, opt)
	if err != nil {
		t.Fatal(err)
	}
	return r, q
}

// TestReportBrowser renders the report in Debian's chromium, headless and
// with every host name unresolvable: the DOM holds the table and every
// plot, and the screenshot is not blank.
func TestReportBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("SPARKCONV_REQUIRE_CHROMIUM") != "" {
			t.Fatal("chromium not installed and SPARKCONV_REQUIRE_CHROMIUM is set (.ci/run installs it)")
		}
		t.Skip("chromium not installed (apt-get install chromium)")
	}
	r, q := tinyResult(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	if err := WriteReport(page, r, q, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteReport(page, r, q, false); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second write: %v", err)
	}
	data, _ := os.ReadFile(page)
	for _, bad := range []string{"<script", "<link", "src=", "@import", "url("} {
		if strings.Contains(string(data), bad) {
			t.Errorf("report holds %q: not self-contained", bad)
		}
	}
	browse := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--host-resolver-rules=MAP * ~NOTFOUND",
			"--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1100,2600"}
		out, err := exec.CommandContext(ctx, chromium, append(append(base, args...), "file://"+page)...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", args, err)
		}
		return out
	}
	dom := string(browse("--dump-dom"))
	figs := 5 // histogram, by position, greedy, layer error, weight SNR
	if n := strings.Count(dom, "<svg"); n != figs || !strings.Contains(dom, "mean KLD") || strings.Count(dom, "<tr>") != len(statRows(r)) {
		t.Errorf("rendered DOM: %d svg (want %d), table rows %d", n, figs, strings.Count(dom, "<tr>"))
	}
	shot := filepath.Join(dir, "shot.png")
	browse("--screenshot=" + shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if ink := inked(img); ink < 0.02 {
		t.Errorf("screenshot is %.1f %% ink: blank page", 100*ink)
	}
	if p := os.Getenv("SPARKCONV_REPORT_SHOT"); p != "" { // keep it (the README's screenshot)
		data, _ := os.ReadFile(shot)
		os.WriteFile(p, data, 0o644)
	}
}

// inked is the share of pixels that are not near-white.
func inked(img image.Image) float64 {
	b := img.Bounds()
	n, ink := 0, 0
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			n++
			if r < 0xe000 || g < 0xe000 || bl < 0xe000 {
				ink++
			}
		}
	}
	return float64(ink) / float64(n)
}
