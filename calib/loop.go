package calib

import (
	"context"
	"fmt"

	"sparkconv/forward"
	"sparkconv/progress"
)

// Loop is the one layer-by-layer calibration loop: every chunk's residual
// stream, advanced through a forward.Model one layer at a time, so that
// each layer's weights are read once for all chunks. An algorithm hooks
// into it in one of two ways:
//
//   - an observer (forward.Observer) given to Layer sees every named point
//     of the layer (forward.Point) on every chunk: calibrate's statistics,
//     rotate's down_proj smoothing;
//   - a stage run by Pass over every chunk reads and advances Streams
//     itself (forward.Stages, a layer's pieces in order), so that what it
//     learns from one stage changes the next before the stream moves on:
//     GPTQ's true-sequential solve, keep-float's cost of one unit.
//
// Between layers, Streams is the residual entering the next layer; after
// the last it is the final residual, for a head pass.
type Loop struct {
	Model   *forward.Model
	Chunks  []Chunk
	Streams [][]float32     // per chunk: the residual where the loop stands, [T, hidden]
	Ctx     context.Context // checked before each chunk; nil: never cancelled
	Bar     *progress.Bar   // advanced once per chunk of each pass; nil: none
	// Label names chunk k in errors (nil: errors carry no chunk name).
	Label func(k int) string
}

// NewLoop embeds every chunk's tokens: the streams at layer 0.
func NewLoop(m *forward.Model, chunks []Chunk) (*Loop, error) {
	l := &Loop{Model: m, Chunks: chunks}
	return l, l.Embed()
}

// Embed sets the streams to every chunk's embedded tokens (layer 0).
func (l *Loop) Embed() error {
	l.Streams = make([][]float32, len(l.Chunks))
	for k, ch := range l.Chunks {
		x, err := l.Model.Embed(ch.IDs)
		if err != nil {
			return l.wrap(k, err)
		}
		l.Streams[k] = x
	}
	return nil
}

// Pass calls visit on every chunk in order with its index and token
// count: the context is checked before each, the bar advanced after.
func (l *Loop) Pass(visit func(k, T int) error) error {
	ctx := l.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	for k, ch := range l.Chunks {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := visit(k, len(ch.IDs)); err != nil {
			return l.wrap(k, err)
		}
		l.Bar.Add(1)
	}
	return nil
}

// Layer runs layer i over every chunk, obs (nil: none) observing its named
// points, and advances the streams past it; kv (nil: dropped) gets each
// chunk's keys and values.
func (l *Loop) Layer(i int, obs forward.Observer, kv func(k int, key, value []float32)) error {
	return l.Pass(func(k, T int) error {
		key, value, err := l.Model.ForwardLayer(i, l.Streams[k], T, obs)
		if err == nil && kv != nil {
			kv(k, key, value)
		}
		return err
	})
}

// wrap names chunk k in err when the loop has a Label.
func (l *Loop) wrap(k int, err error) error {
	if l.Label == nil {
		return err
	}
	return fmt.Errorf("%s: %w", l.Label(k), err)
}
