package gptq

import (
	"errors"
	"fmt"

	"sparkconv/calib"
	"sparkconv/forward"
	"sparkconv/kernels"
	"sparkconv/quant"
)

// stream is the float model run beside the quantized one over the same
// calibration chunks (Calibrator.FloatTarget): its own forward (the
// checkpoint's weights, never replaced by codes) and residual streams, so
// each stage's float input to a linear is at hand when the quantized input
// to it is accumulated. Nothing the solve does changes the float stream,
// so each of its stages hands its output on within the chunk (floatStages):
// one hand-over buffer for all chunks, not one per chunk.
type stream struct {
	loop *calib.Loop // the float forward and its residual streams
	hand []float32   // what a stage hands on, for the chunk being run
	norm []float32   // a norm's output for the chunk being run
}

// newStream starts the float stream from the quantized one's embeddings
// (the embedding is not quantized by the solve).
func (r *run) newStream() error {
	fm, err := forward.New(r.j.Model, forward.Options{CachedLayers: 1, FamilyLinears: true})
	if err != nil {
		return err
	}
	q := r.loop
	cfg := r.j.Model.Config
	st := &stream{loop: &calib.Loop{Model: fm, Chunks: q.Chunks, Streams: make([][]float32, len(q.Streams))},
		hand: make([]float32, len(r.norm)/cfg.HiddenSize*max(cfg.QDim(), cfg.IntermediateSize)), norm: make([]float32, len(r.norm))}
	for k := range q.Streams {
		st.loop.Streams[k] = append([]float32(nil), q.Streams[k]...)
	}
	r.float = st
	return nil
}

// floatStages are the float stream's stages of a layer, beside stagesOf's
// (the same inputs in the same order, each computed as the quantized
// stream computes it): the attention's output and the MLP's are added to
// the residual in the stage that produces their input, so that no stage
// needs what an earlier one left per chunk.
func floatStages(s *forward.Stages, xs [][]float32, hand, norm []float32) []stage {
	return []stage{
		{func(k, T int) []float32 { s.InputNorm(norm, xs[k], T); return norm }, forward.AttnNorm},
		{func(k, T int) []float32 {
			s.InputNorm(norm, xs[k], T)
			s.Attention(hand, norm, T)
			s.AttnOut(xs[k], hand, T) // reads hand, leaves it as it was
			return hand
		}, forward.AttnGated},
		{func(k, T int) []float32 { s.PostNorm(norm, xs[k], T); return norm }, forward.MLPNorm},
		{func(k, T int) []float32 {
			s.PostNorm(norm, xs[k], T)
			s.MLPAct(hand, norm, T)
			s.MLPOut(xs[k], hand, T)
			return hand
		}, forward.MLPAct},
		{func(k, T int) []float32 { return nil }, -1},
	}
}

// FloatTargetWithSmooth is why the float target and SmoothQuant are
// refused together (the library's error, the command's usage error).
const FloatTargetWithSmooth = "the float target (--float-target) and SmoothQuant (--smooth) cannot be combined: smoothing rescales the quantized model's norms, which the float model beside it does not share"

// checkFloatTarget refuses a weight outside [0, 1] and the combinations
// the float stream cannot serve.
func (c *Calibrator) checkFloatTarget() error {
	if c.FloatTarget < 0 || c.FloatTarget > 1 {
		return fmt.Errorf("float target weight %g is outside [0, 1]", c.FloatTarget)
	}
	if c.FloatTarget > 0 && c.Smooth > 0 {
		return errors.New(FloatTargetWithSmooth)
	}
	return nil
}

// floatTarget returns W* = W + alpha W C H^-1 for the [n, k] weights w,
// where C is h's Cross and H^-1 = U^T U comes from f (the damped Hessian
// the solve uses, in f's processing order): the weights whose product
// with the quantized input X best matches, in least squares on the
// calibration rows, the float weights' product with the float input X_f
// (alpha = 1), or a step toward them. Computed right to left in float32
// with [n, k] intermediates only (no [k, k] one beside C): T = W C in
// channel order, its columns permuted into f's order (W_p C_p = (W C)_p),
// then T U^T, then alpha (T U^T) U, added back in channel order.
func floatTarget(w []float32, n, k int, f *Factor, cross []float32, alpha float64) quant.Matrix {
	perm, u := f.Perm, f.U
	t, tp := make([]float32, n*k), make([]float32, n*k)
	kernels.Sgemm(false, false, n, k, k, 1, w, k, cross, k, 0, t, k) // W C
	kernels.Parallel(n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			for i, c := range perm {
				tp[r*k+i] = t[r*k+c]
			}
		}
	})
	kernels.Sgemm(false, true, n, k, k, 1, tp, k, u, k, 0, t, k)               // (W C)_p U^T
	kernels.Sgemm(false, false, n, k, k, float32(alpha), t, k, u, k, 0, tp, k) // alpha (W C)_p U^T U
	out := t
	kernels.Parallel(n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			o, p, row := out[r*k:(r+1)*k], tp[r*k:(r+1)*k], w[r*k:(r+1)*k]
			for i, c := range perm {
				o[c] = row[c] + p[i]
			}
		}
	})
	return quant.F32Matrix(n, k, out)
}
