package eval

import (
	"math"
	"slices"
)

// Token is what one scored position contributes: the base's and the
// build's negative log-likelihood of the true next token, the KL divergence
// of the build's next-token distribution from the base's, whether the two
// agree on the most likely token, and the change in the true token's
// probability.
type Token struct {
	NLLBase, NLL float64
	KLD          float64
	SameTop1     bool
	DeltaP       float64 // p_build(true) - p_base(true)
	Pos          int     // position in the window
	Window       int     // the window's index
}

// Stats are llama.cpp's --kl-divergence figures over the scored tokens.
type Stats struct {
	TokensScored int        `json:"tokens_scored"`
	KLD          KLDStats   `json:"kld"`
	SameTop1     float64    `json:"same_top1"`     // fraction
	SameTop1Err  float64    `json:"same_top1_err"` // binomial standard error
	PPL          float64    `json:"ppl"`
	PPLBase      float64    `json:"ppl_base"`
	PPLRatio     float64    `json:"ppl_ratio"`
	LnPPLRatio   MeanErr    `json:"ln_ppl_ratio"` // mean of nll - nll_base, with its standard error
	DeltaP       DeltaStats `json:"delta_p"`
}

// KLDStats summarize the per-token KL divergences (nats).
type KLDStats struct {
	Mean   float64 `json:"mean"`
	Stderr float64 `json:"stderr"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
	P999   float64 `json:"p999"`
	Max    float64 `json:"max"`
}

// MeanErr is a mean with its standard error.
type MeanErr struct {
	Mean   float64 `json:"mean"`
	Stderr float64 `json:"stderr"`
}

// DeltaStats summarize Δp (fractions, not percent).
type DeltaStats struct {
	Mean float64 `json:"mean"`
	RMS  float64 `json:"rms"`
}

// Summarize computes the statistics of the scored tokens (at least one).
func Summarize(toks []Token) Stats {
	n := len(toks)
	s := Stats{TokensScored: n}
	if n == 0 {
		return s
	}
	kld := make([]float64, n)
	var nllB, nll, same, dp, dp2 float64
	lnr := make([]float64, n)
	for i, t := range toks {
		kld[i] = t.KLD
		nllB += t.NLLBase
		nll += t.NLL
		lnr[i] = t.NLL - t.NLLBase
		if t.SameTop1 {
			same++
		}
		dp += t.DeltaP
		dp2 += t.DeltaP * t.DeltaP
	}
	fn := float64(n)
	s.PPLBase = math.Exp(nllB / fn)
	s.PPL = math.Exp(nll / fn)
	s.PPLRatio = s.PPL / s.PPLBase
	s.LnPPLRatio = meanErr(lnr)
	k := meanErr(kld)
	s.KLD.Mean, s.KLD.Stderr = k.Mean, k.Stderr
	slices.Sort(kld)
	s.KLD.Median = Percentile(kld, 0.5)
	s.KLD.P90 = Percentile(kld, 0.90)
	s.KLD.P99 = Percentile(kld, 0.99)
	s.KLD.P999 = Percentile(kld, 0.999)
	s.KLD.Max = kld[n-1]
	s.SameTop1 = same / fn
	if n > 1 {
		s.SameTop1Err = math.Sqrt(s.SameTop1 * (1 - s.SameTop1) / (fn - 1))
	}
	s.DeltaP.Mean = dp / fn
	s.DeltaP.RMS = math.Sqrt(dp2 / fn)
	return s
}

// meanErr is the mean and sqrt((E[x²] - mean²) / (n - 1)), llama.cpp's
// uncertainty of a mean.
func meanErr(x []float64) MeanErr {
	var sum, sum2 float64
	for _, v := range x {
		sum += v
		sum2 += v * v
	}
	n := float64(len(x))
	m := MeanErr{Mean: sum / n}
	if len(x) > 1 {
		m.Stderr = math.Sqrt(max(0, sum2/n-m.Mean*m.Mean) / (n - 1))
	}
	return m
}

// Percentile is llama.cpp's percentile of sorted values: linear
// interpolation at fraction*(n-1).
func Percentile(sorted []float64, fraction float64) float64 {
	n := len(sorted)
	switch {
	case n == 0:
		return math.NaN()
	case fraction <= 0:
		return sorted[0]
	case fraction >= 1:
		return sorted[n-1]
	}
	p := fraction * float64(n-1)
	i := int(p)
	p -= float64(i)
	return (1-p)*sorted[i] + p*sorted[min(i+1, n-1)]
}

// ByPosition is the mean KLD at each scored position of the window
// (index 0 = the first scored position, ctx/2).
func ByPosition(toks []Token, first, count int) []float64 {
	sum, num := make([]float64, count), make([]float64, count)
	for _, t := range toks {
		if i := t.Pos - first; i >= 0 && i < count {
			sum[i] += t.KLD
			num[i]++
		}
	}
	for i := range sum {
		if num[i] > 0 {
			sum[i] /= num[i]
		}
	}
	return sum
}

// LogSoftmax writes the log-probabilities of logits into dst (float64
// accumulation) and returns the argmax.
func LogSoftmax(dst, logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	mx := float64(logits[best])
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	for i, v := range logits {
		dst[i] = float32(float64(v) - lse)
	}
	return best
}

// Score compares one position: base and build log-probabilities (each
// [V], from LogSoftmax) and the true next token.
func Score(base, build []float32, baseTop, buildTop, next, pos int) Token {
	var kld float64
	for v, lb := range base {
		if lb > -80 { // exp(-80) ~ 1.8e-35: below float64 noise of the sum
			kld += math.Exp(float64(lb)) * (float64(lb) - float64(build[v]))
		}
	}
	return Token{
		NLLBase:  -float64(base[next]),
		NLL:      -float64(build[next]),
		KLD:      kld,
		SameTop1: baseTop == buildTop,
		DeltaP:   math.Exp(float64(build[next])) - math.Exp(float64(base[next])),
		Pos:      pos,
	}
}
