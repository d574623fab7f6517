package rotate

import (
	"fmt"
	"io"
	"math"
	"path/filepath"

	"sparkconv/calib"
	"sparkconv/forward"
	"sparkconv/quant"
	"sparkconv/spark"
	"sparkconv/tokenizer"
)

// Down-proj smoothing: down_proj's input is gelu(gate)·up, per channel j
// of the intermediate size, so dividing up_proj's output row j by s_j and
// multiplying down_proj's column j by s_j is the same network exactly. With
// s_j = max|X_j|^alpha / max|W_down[:, j]|^(1-alpha) (SmoothQuant's rule,
// quant.SmoothScales; X the down_proj input on calibration text), the
// channels where a real model's massive activations sit are scaled down
// for per-token int8, and the scale moves into down_proj's weights. Unlike
// SmoothQuant on a norm's output, nothing but the two linears changes, and
// per-output-row weight scales (every format here) absorb up_proj's row
// scaling exactly.

// Defaults of the down_proj smoothing (rotate's --smooth-down, --tokens).
// The per-channel maxima settle within a few thousand tokens; alpha 0.3
// is the best of 0.3, 0.5, 0.7 for W8A8 on the real-weights model
// (docs/rotation.md).
const (
	DefaultSmoothAlpha  = 0.3
	DefaultSmoothTokens = 2048
)

// MaxSmoothAlpha is the largest alpha of the down_proj smoothing; at 1 the
// scales would ignore the weights (s_j = max|X_j|).
const MaxSmoothAlpha = 0.99

// Smoothing asks for down_proj smoothing.
type Smoothing struct {
	Alpha  float64  // in [0, MaxSmoothAlpha]; 0: no smoothing (unless Auto)
	Auto   bool     // choose alpha per layer (smoothauto.go); Alpha is then unused
	Files  []string // calibration samples files; none: the embedded corpus
	Tokens int      // calibration tokens run through the model
	SeqLen int      // longest chunk
}

// Check refuses an Alpha outside [0, MaxSmoothAlpha] (NaN included), naming
// the field.
func (o Smoothing) Check() error {
	if !(o.Alpha >= 0 && o.Alpha <= MaxSmoothAlpha) {
		return fmt.Errorf("Alpha %g: want a number in [0, %g]", o.Alpha, MaxSmoothAlpha)
	}
	return nil
}

// smoothed is the outcome: per layer the scales s (intermediate size).
type smoothed struct {
	s       [][]float32
	sources []string
	sha256  string
	tokens  int
	// alphas[i] is layer i's chosen alpha and errs[i] the W8A8 error of
	// every candidate of AutoAlphas (Auto only).
	alphas []float64
	errs   [][]float64
}

// meta records the smoothing in config.json and the report.
func (s *smoothed) meta(o Smoothing) map[string]any {
	m := map[string]any{"alpha": o.Alpha, "sources": s.sources, "sha256": s.sha256, "tokens": s.tokens,
		"applies_to": "down_proj input: up_proj rows / s, down_proj columns · s"}
	if o.Auto {
		m["alpha"] = "auto"
		m["layer_alphas"] = s.alphas
		m["candidates"] = AutoAlphas
		m["criterion"] = "per layer, the lowest W8A8 output error of down_proj on the calibration tokens (int8 per token of X/s, int8 per row of W·s, round to nearest); alpha 0: not smoothed"
	}
	return m
}

// downScales runs the calibration text through sm's float32 forward and
// returns the smoothing scales of every layer; rotated gives the weight
// down_proj will have (the scales weigh its columns' maxima, not the
// input's). A warning on the calibration tokens goes to log.
func downScales(sm *spark.Model, dir string, o Smoothing, rotated func(down []float32) []float32, log io.Writer) (*smoothed, error) {
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("down_proj smoothing needs the model's tokenizer.json (or --smooth-down 0): %w", err)
	}
	c := sm.Config
	src := calib.Source{Files: o.Files, Default: calib.CalibText, Tok: tok, Vocab: c.VocabSize, MinTokens: calib.MinTokens, Log: log}
	text, err := src.Take(&calib.Prefix{Tokens: o.Tokens, SeqLen: o.SeqLen})
	if err != nil {
		return nil, err
	}
	chunks, tokens, rd := text.Chunks, text.Tokens, text.Read
	m, err := forward.New(sm, forward.Options{CachedLayers: 1})
	if err != nil {
		return nil, err
	}
	loop, err := calib.NewLoop(m, chunks)
	if err != nil {
		return nil, err
	}
	out := &smoothed{sources: rd.Sources, sha256: rd.SHA256, tokens: tokens}
	for i := range c.NumLayers {
		obs := &actRows{actMax: actMax{max: make([]float64, c.IntermediateSize)}, keep: o.Auto}
		if err := loop.Layer(i, obs, nil); err != nil {
			return nil, err
		}
		_, down, err := sm.Float32(spark.LayerWeight(i, spark.MLPDown))
		if err != nil {
			return nil, err
		}
		if !o.Auto {
			out.s = append(out.s, smoothScales(obs.max, rotated(down), o.Alpha))
		} else {
			ch := chooseAlpha(obs.rows, obs.max, rotated(down), c.IntermediateSize)
			out.s, out.alphas, out.errs = append(out.s, ch.s), append(out.alphas, ch.alpha), append(out.errs, ch.errs)
		}
		m.DropLayers()
	}
	return out, nil
}

// smoothScales is quant.SmoothScales of down_proj's input maxima amax and
// its column maxima, rounded to float32 (the scales both linears take).
func smoothScales(amax []float64, down []float32, alpha float64) []float32 {
	wmax := make([]float64, len(amax))
	quant.ColumnAbsMax(wmax, down)
	s := make([]float32, len(amax))
	for j, v := range quant.SmoothScales(amax, wmax, alpha) {
		s[j] = float32(v)
	}
	return s
}

// actMax records the per-channel absmax of down_proj's input.
type actMax struct{ max []float64 }

func (a *actMax) Observe(_ int, p forward.Point, data []float32, cols int) {
	if p != forward.MLPAct {
		return
	}
	for r := 0; r < len(data)/cols; r++ {
		for j, v := range data[r*cols : (r+1)*cols] {
			a.max[j] = max(a.max[j], math.Abs(float64(v)))
		}
	}
}
