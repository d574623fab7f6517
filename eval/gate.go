package eval

import (
	"context"
	"fmt"

	"sparkconv/convert"
)

// Gate is a build's fidelity check (the builds' --eval, --max-kld and
// --min-top1): the committed build scored against its input model on
// held-out text with DefaultSettings, the figures and the verdict recorded
// in the build's report file, and the build failed when it misses a bar.
// The zero Gate checks nothing.
type Gate struct {
	On      bool    // score the build
	Samples string  // held-out samples file; "": the built-in held-out text
	MaxKLD  float64 // fail above this mean KLD; 0: no bar
	MinTop1 float64 // fail below this same-top-1 fraction; 0: no bar
}

// Verdict is the report's "gate": the bars set and whether the build
// passed them.
type Verdict struct {
	MaxKLD  *float64 `json:"max_kld,omitempty"`
	MinTop1 *float64 `json:"min_top1,omitempty"`
	Passed  bool     `json:"passed"`
	Error   string   `json:"error,omitempty"`
}

// job is the evaluation of out against model.
func (g Gate) job(ctx context.Context, model, out string) Options {
	j := Options{Base: model, Build: out, Samples: g.Samples, Settings: DefaultSettings}
	j.Settings.Context = ctx
	return j
}

// Check reads and tokenizes the gate's text with model's tokenizer as the
// evaluation will, so that bad text is refused before the build, not after.
func (g Gate) Check(model string) error {
	if !g.On {
		return nil
	}
	return g.job(context.Background(), model, "").Check()
}

// Apply scores the committed build out against model, records the figures
// (report "eval") and the verdict (report "gate", when a bar is set) in r
// and in out's report file, and returns the figures and the verdict: a
// non-nil verdict is a build that missed a bar (it stays written). The
// error is the evaluation's own.
func (g Gate) Apply(ctx context.Context, r *convert.Report, model, out string) (res *Result, verdict, err error) {
	if !g.On {
		return nil, nil, nil
	}
	inputs := []string{model, out}
	if g.Samples != "" {
		inputs = append(inputs, g.Samples)
	}
	if res, err = Run(g.job(ctx, model, out), inputs...); err != nil {
		return nil, nil, fmt.Errorf("--eval: %w", err)
	}
	r.Eval = res
	switch {
	case g.MaxKLD > 0 && res.KLD.Mean > g.MaxKLD:
		verdict = fmt.Errorf("fidelity gate failed: mean KLD %.6f > --max-kld %g (the build is written; see %s)", res.KLD.Mean, g.MaxKLD, convert.ReportFile)
	case g.MinTop1 > 0 && res.SameTop1 < g.MinTop1:
		verdict = fmt.Errorf("fidelity gate failed: same top-1 %.4f < --min-top1 %g (the build is written; see %s)", res.SameTop1, g.MinTop1, convert.ReportFile)
	}
	if g.MaxKLD > 0 || g.MinTop1 > 0 {
		v := Verdict{Passed: verdict == nil}
		if g.MaxKLD > 0 {
			v.MaxKLD = &g.MaxKLD
		}
		if g.MinTop1 > 0 {
			v.MinTop1 = &g.MinTop1
		}
		if verdict != nil {
			v.Error = verdict.Error()
		}
		r.Gate = v
	}
	if err := r.Rewrite(out); err != nil {
		return nil, nil, err
	}
	return res, verdict, nil
}
