package calib

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"sparkconv/forward"
)

// countObserver counts the calls per point and the rows seen.
type countObserver struct {
	calls map[forward.Point]int
	rows  int
}

func (o *countObserver) Observe(_ int, p forward.Point, data []float32, cols int) {
	o.calls[p]++
	if p == forward.HiddenOut {
		o.rows += len(data) / cols
	}
}

// TestLoop: the streams advanced layer by layer equal ForwardLayer's run
// chunk by chunk; the observer sees every chunk at every point; kv gets
// each chunk's keys and values; a cancelled context stops a pass before
// its first chunk; an error names its chunk by Label.
func TestLoop(t *testing.T) {
	m, err := forward.Open(tinyModel(t), forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	chunks := []Chunk{{IDs: []int{1, 2, 3, 4, 5}}, {Sample: 1, IDs: []int{7, 8, 9}}}
	loop, err := NewLoop(m, chunks)
	if err != nil {
		t.Fatal(err)
	}
	H := m.Cfg.HiddenSize
	want := make([][]float32, len(chunks))
	for k, ch := range chunks {
		if want[k], err = m.Embed(ch.IDs); err != nil {
			t.Fatal(err)
		}
	}
	for i := range m.Cfg.NumLayers {
		obs := &countObserver{calls: map[forward.Point]int{}}
		var kvs []int
		if err := loop.Layer(i, obs, func(k int, key, value []float32) {
			if len(key) == 0 || len(key) != len(value) {
				t.Errorf("layer %d chunk %d: keys %d values %d", i, k, len(key), len(value))
			}
			kvs = append(kvs, k)
		}); err != nil {
			t.Fatal(err)
		}
		if obs.calls[forward.HiddenOut] != len(chunks) || obs.rows != 8 || !slices.Equal(kvs, []int{0, 1}) {
			t.Errorf("layer %d: %d hidden_out calls over %d rows, kv of %v", i, obs.calls[forward.HiddenOut], obs.rows, kvs)
		}
		for k, ch := range chunks {
			if _, _, err := m.ForwardLayer(i, want[k], len(ch.IDs), nil); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(loop.Streams[k][:len(ch.IDs)*H], want[k]) {
				t.Fatalf("layer %d chunk %d: the loop's stream differs from ForwardLayer's", i, k)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	visited := 0
	loop.Ctx = ctx
	if err := loop.Pass(func(k, T int) error { visited++; return nil }); !errors.Is(err, context.Canceled) || visited != 0 {
		t.Errorf("cancelled pass: %v after %d chunks", err, visited)
	}
	loop.Ctx = nil
	loop.Label = func(k int) string { return fmt.Sprintf("chunk %d", k) }
	bad := errors.New("bad row")
	err = loop.Pass(func(k, T int) error {
		if k == 1 {
			return bad
		}
		return nil
	})
	if !errors.Is(err, bad) || !strings.HasPrefix(err.Error(), "chunk 1: ") {
		t.Errorf("error of chunk 1: %v", err)
	}
	l := &Loop{Model: m, Chunks: []Chunk{{IDs: []int{m.Cfg.VocabSize}}}, Label: func(int) string { return "sample 9" }}
	if err := l.Embed(); err == nil || !strings.HasPrefix(err.Error(), "sample 9: ") {
		t.Errorf("an id outside the vocabulary: %v", err)
	}
}
