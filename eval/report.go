package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"sparkconv/convert"
	"sparkconv/infile"
	"sparkconv/outdir"
)

// WriteReport writes r as one self-contained HTML file (inline SVG plots,
// no scripts, nothing fetched): the statistics, a histogram of the per-token
// KLD, the mean KLD along the window, the greedy divergence points, and, when
// the build folder holds a sparkconv-report.json, the weight SNR of every
// quantized tensor. The file follows outdir.File's rules: never one of
// inputs, and an existing file is replaced only with force and only when it
// is a report sparkconv wrote (ReportOwner).
func WriteReport(path string, r *Result, buildDir string, force bool, inputs ...string) error {
	out, err := outdir.NewFile(path, force, ReportOwner, inputs...)
	if err != nil {
		return err
	}
	var figs []figure
	add := func(title, caption string, p *plot.Plot, err error) error {
		if err != nil {
			return err
		}
		svg, err := svgOf(p)
		if err != nil {
			return fmt.Errorf("plot %q: %w", title, err)
		}
		figs = append(figs, figure{Title: title, Caption: caption, SVG: template.HTML(svg)})
		return nil
	}
	p, err := kldHistogram(r)
	if err := add("KL divergence per scored token", "log10 of each token's KLD (nats); tokens with KLD below 1e-8 are counted at -8.", p, err); err != nil {
		return err
	}
	p, err = kldByPosition(r)
	if err := add("Mean KLD along the window", fmt.Sprintf("position in the %d-token window (every scored position has at least half a window of context); a rise past the sliding window is the full-attention layers' long context at work.", r.Ctx), p, err); err != nil {
		return err
	}
	if r.Greedy.Prompts > 0 {
		p, err = greedyPlot(r)
		if err := add("Greedy continuations", fmt.Sprintf("per prompt: how many of the %d greedy tokens the build reproduced before the first different one.", r.Greedy.Tokens), p, err); err != nil {
			return err
		}
	}
	if len(r.LayerRelErr) > 0 {
		p, err = layerPlot(r)
		if err := add("Output error per layer", "SNR (dB) of the residual stream leaving each layer against the original's, over the first window's scored positions: where the error enters and how it compounds (layers that match exactly are left out).", p, err); err != nil {
			return err
		}
	}
	if rep, ok := readBuildReport(buildDir); ok && len(rep.Tensors) > 0 {
		p, err = snrPlot(rep)
		if err := add("Weight SNR per quantized tensor", "signal-to-noise ratio of each dequantized weight against the original (dB), tensors sorted by name, from the build's sparkconv-report.json.", p, err); err != nil {
			return err
		}
	}
	var buf bytes.Buffer
	if err := reportTmpl.Execute(&buf, map[string]any{"R": r, "Rows": statRows(r), "Figs": figs}); err != nil {
		return err
	}
	return out.WriteBytes(buf.Bytes())
}

// reportHead is how every report WriteReport writes begins.
const reportHead = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>sparkconv eval: "

// ReportOwner is the outdir.Owner of eval reports: a file that begins as
// every report sparkconv writes does.
func ReportOwner(path string) error {
	f, _, err := infile.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, len(reportHead))
	n, _ := io.ReadFull(f, head)
	if string(head[:n]) != reportHead {
		return errors.New("it does not begin as a sparkconv eval report does")
	}
	return nil
}

type figure struct {
	Title, Caption string
	SVG            template.HTML
}

// statRows are the table's label/value pairs.
func statRows(r *Result) [][2]string {
	f := func(format string, a ...any) string { return fmt.Sprintf(format, a...) }
	rows := [][2]string{
		{"tokens scored", f("%d (%d windows of %d)", r.TokensScored, r.Window, r.Ctx)},
		{"mean KLD", f("%.6f ± %.6f", r.KLD.Mean, r.KLD.Stderr)},
		{"KLD median / 90 % / 99 % / 99.9 % / max", f("%.6f / %.6f / %.6f / %.6f / %.6f", r.KLD.Median, r.KLD.P90, r.KLD.P99, r.KLD.P999, r.KLD.Max)},
		{"same top-1", f("%.3f %% ± %.3f %%", 100*r.SameTop1, 100*r.SameTop1Err)},
		{"PPL (build / base)", f("%.4f / %.4f", r.PPL, r.PPLBase)},
		{"PPL ratio", f("%.6f", r.PPLRatio)},
		{"mean ln(PPL ratio)", f("%.6f ± %.6f", r.LnPPLRatio.Mean, r.LnPPLRatio.Stderr)},
		{"Δp mean / RMS", f("%.3f %% / %.3f %%", 100*r.DeltaP.Mean, 100*r.DeltaP.RMS)},
	}
	if g := r.Greedy; g.Prompts > 0 {
		rows = append(rows, [2]string{"greedy reproduction", f("%d / %d prompts exact over %d tokens, %.1f %% of the prefix kept", g.Exact, g.Prompts, g.Tokens, 100*g.PrefixKept)})
	}
	return rows // no timing: the same evaluation writes the same report
}

func svgOf(p *plot.Plot) (string, error) {
	w, err := p.WriterTo(7*vg.Inch, 3*vg.Inch, "svg")
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		return "", err
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i > 0 { // drop the XML prolog inside HTML
		s = s[i:]
	}
	return s, nil
}

func kldHistogram(r *Result) (*plot.Plot, error) {
	v := make(plotter.Values, len(r.Tokens))
	for i, t := range r.Tokens {
		v[i] = math.Log10(max(t.KLD, 1e-8))
	}
	h, err := plotter.NewHist(v, 40)
	if err != nil {
		return nil, err
	}
	p := labeledPlot("log10 KLD (nats)", "tokens")
	p.Add(h)
	return p, nil
}

func kldByPosition(r *Result) (*plot.Plot, error) {
	first, _ := Scored(r.Ctx)
	xy := make(plotter.XYs, len(r.KLDByPosition))
	for i, k := range r.KLDByPosition {
		xy[i] = plotter.XY{X: float64(first + i), Y: k}
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return nil, err
	}
	p := labeledPlot("position in window", "mean KLD (nats)")
	p.Add(l)
	return p, nil
}

func greedyPlot(r *Result) (*plot.Plot, error) {
	v := make(plotter.Values, len(r.Greedy.Diverged))
	for i, d := range r.Greedy.Diverged {
		v[i] = float64(d)
	}
	b, err := plotter.NewBarChart(v, vg.Points(12))
	if err != nil {
		return nil, err
	}
	p := labeledPlot("prompt", "tokens reproduced")
	p.Y.Max = float64(r.Greedy.Tokens)
	p.Add(b)
	return p, nil
}

func layerPlot(r *Result) (*plot.Plot, error) {
	var xy plotter.XYs
	for i, e := range r.LayerRelErr {
		if e > 0 {
			xy = append(xy, plotter.XY{X: float64(i), Y: -20 * math.Log10(e)})
		}
	}
	p := labeledPlot("layer", "output SNR (dB)")
	if len(xy) == 0 {
		return p, nil
	}
	l, pts, err := plotter.NewLinePoints(xy)
	if err != nil {
		return nil, err
	}
	p.Add(l, pts)
	return p, nil
}

func snrPlot(rep *convert.Report) (*plot.Plot, error) {
	xy := make(plotter.XYs, len(rep.Tensors))
	for i, t := range rep.Tensors {
		xy[i] = plotter.XY{X: float64(i), Y: t.SNRdB}
	}
	s, err := plotter.NewScatter(xy)
	if err != nil {
		return nil, err
	}
	p := labeledPlot("quantized tensor (sorted by name)", "weight SNR (dB)")
	p.Add(s)
	return p, nil
}

// readBuildReport reads the build's sparkconv-report.json, if any.
func readBuildReport(dir string) (*convert.Report, bool) {
	data, err := infile.ReadFile(filepath.Join(dir, convert.ReportFile), infile.ManifestMax)
	if err != nil {
		return nil, false
	}
	var rep convert.Report
	if json.Unmarshal(data, &rep) != nil {
		return nil, false
	}
	return &rep, true
}

var reportTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>sparkconv eval: {{.R.Model}}</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
table { border-collapse: collapse; } td { padding: .25rem .8rem; border-bottom: 1px solid #ddd; }
td:first-child { color: #555; } td:last-child { font-variant-numeric: tabular-nums; }
figure { margin: 1rem 0; } figcaption { color: #555; font-size: .9rem; }
svg { max-width: 100%; height: auto; }
</style></head><body>
<h1>sparkconv eval</h1>
<p><b>build</b> {{.R.Model}}<br><b>base</b> {{.R.Base}}<br><b>text</b> {{.R.Text}}</p>
<table id="stats">{{range .Rows}}<tr><td>{{index . 0}}</td><td>{{index . 1}}</td></tr>
{{end}}</table>
{{range .Figs}}<h2>{{.Title}}</h2><figure>{{.SVG}}<figcaption>{{.Caption}}</figcaption></figure>
{{end}}</body></html>
`))

// labeledPlot is an empty plot with its axis labels.
func labeledPlot(x, y string) *plot.Plot {
	p := plot.New()
	p.X.Label.Text, p.Y.Label.Text = x, y
	return p
}
