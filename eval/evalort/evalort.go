// Package evalort drives an ONNX decode-step export in ONNX Runtime as an
// eval.Model, exactly as a phone runtime runs it: token by token through
// the embed graph, every layer graph with its ring or roll caches, masks and
// rope inputs (ortrun.Runner, written from the export contract alone), and
// the head. Each sequence starts from empty caches. It needs cgo (ONNX
// Runtime); package eval itself does not.
package evalort

import (
	"encoding/json"
	"fmt"

	"sparkconv/onnxgraph"
	"sparkconv/ortrun"
)

// Export is an opened export folder.
type Export struct {
	dir    string
	runner *ortrun.Runner
	vocab  int
	opt    string
}

// Open loads every graph of the export in dir (ONNX Runtime must be
// initialized). optimize is ONNX Runtime's graph optimization level ("":
// all for float32 exports, extended for float16, as verify uses).
func Open(dir string, threads int, optimize string) (*Export, error) {
	man, err := onnxgraph.ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if man.Partial {
		return nil, fmt.Errorf("%s is a partial export (--layers): eval needs every layer, the embedding and the head", dir)
	}
	var vocab int
	if err := json.Unmarshal(man.Config["vocab_size"], &vocab); err != nil || vocab < 1 {
		return nil, fmt.Errorf("%s: manifest config has no vocab_size", dir)
	}
	if optimize == "" {
		optimize = "all"
		if man.DType == "float16" {
			optimize = "extended"
		}
	}
	r, err := ortrun.OpenRunner(dir, ortrun.RunnerOptions{SessionOptions: ortrun.SessionOptions{Threads: threads, Optimize: optimize}})
	if err != nil {
		return nil, err
	}
	return &Export{dir: dir, runner: r, vocab: vocab, opt: optimize}, nil
}

// Close releases the sessions.
func (e *Export) Close() { e.runner.Close() }

// Context is the longest sequence the export's caches hold.
func (e *Export) Context() int { return e.runner.Manifest.Context }

// Describe names the export.
func (e *Export) Describe() string {
	m := e.runner.Manifest
	return fmt.Sprintf("ONNX export %s (%s, %s layout, context %d) in ONNX Runtime %s, optimization %s", e.dir, m.DType, m.Layout, m.Context, ortrun.Version(), e.opt)
}

// Vocab is the manifest config's vocab_size.
func (e *Export) Vocab() int { return e.vocab }

// Logits decodes ids one token at a time from empty caches and returns the
// head's logits at positions first..len(ids)-1.
func (e *Export) Logits(ids []int, first int) ([]float32, error) {
	if len(ids) > e.Context() {
		return nil, fmt.Errorf("%d tokens do not fit the export's context of %d (export with a larger --context, or eval with a smaller --ctx)", len(ids), e.Context())
	}
	r := e.runner.Clone() // the pristine caches, shared sessions
	defer r.Close()
	var out []float32
	for p, id := range ids {
		tr, err := r.Step(int64(id), p)
		if err != nil {
			return nil, fmt.Errorf("position %d: %w", p, err)
		}
		if p >= first {
			if len(tr.Logits) != e.vocab {
				return nil, fmt.Errorf("position %d: head gave %d logits, vocab_size is %d", p, len(tr.Logits), e.vocab)
			}
			out = append(out, tr.Logits...)
		}
	}
	return out, nil
}
