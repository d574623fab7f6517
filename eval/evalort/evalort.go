// Package evalort drives an ONNX decode-step export in ONNX Runtime as an
// eval.Model, exactly as a phone runtime runs it: token by token through
// the embed graph, every layer graph with its ring or roll caches, masks and
// rope inputs (onnxgraph's host loop, written from the export contract
// alone), and the head. Each sequence starts from empty caches. It needs
// cgo (ONNX Runtime); package eval itself does not.
//
// Batches run graph-major: one graph's session is open at a time, and
// every position of every sequence of the batch goes through it before
// the next graph opens, keeping per sequence only the residual stream
// between graphs and the current layer's caches. Each graph sees exactly
// the inputs it sees token by token, so the figures are the same as a
// Runner's, with one graph's weights in memory instead of the whole export.
package evalort

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"

	"sparkconv/eval"
	"sparkconv/onnxgraph"
	"sparkconv/ortrun"
)

// Export is an opened export folder.
type Export struct {
	dir           string
	man           *onnxgraph.Manifest
	dt            onnxgraph.DType
	sopt          ortrun.SessionOptions
	vocab, hidden int
	runner        *ortrun.Runner // every session at once, for Logits; opened on first use
}

// Prepare refuses the export in dir when its caches hold fewer positions
// than windows of ctx tokens and greedy sequences of greedy tokens need,
// and loads ONNX Runtime (ortLib, else ortrun.FindORTLib's search).
func Prepare(dir, ortLib string, ctx, greedy int) error {
	man, err := onnxgraph.ReadVerified(dir)
	if err != nil {
		return err
	}
	if need := max(ctx-1, greedy); need > man.Context {
		return fmt.Errorf("--export %s holds %d positions; --ctx %d and the greedy test need %d (export with --context %d or more, or lower --ctx)", dir, man.Context, ctx, need, need)
	}
	lib, err := ortrun.FindORTLib(ortLib)
	if err != nil {
		return err
	}
	return ortrun.Init(lib)
}

// Open reads the export's manifest in dir and checks every graph against
// its sha256 (onnxgraph.ReadVerified); sessions open when graphs run
// (ONNX Runtime must be initialized). optimize is ONNX Runtime's graph
// optimization level ("": all for float32 exports, extended for float16,
// as verify uses).
func Open(dir string, threads int, optimize string) (*Export, error) {
	man, err := onnxgraph.ReadVerified(dir)
	if err != nil {
		return nil, err
	}
	if man.Partial {
		return nil, fmt.Errorf("%s is a partial export (--layers): eval needs every layer, the embedding and the head", dir)
	}
	dt, err := onnxgraph.ParseDType(man.DType)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	e := &Export{dir: dir, man: man, dt: dt}
	for key, v := range map[string]*int{"vocab_size": &e.vocab, "hidden_size": &e.hidden} {
		if err := json.Unmarshal(man.Config[key], v); err != nil || *v < 1 {
			return nil, fmt.Errorf("%s: manifest config has no %s", dir, key)
		}
	}
	if optimize == "" {
		optimize = "all"
		if dt == onnxgraph.Float16 {
			optimize = "extended"
		}
	}
	e.sopt = ortrun.SessionOptions{Threads: threads, Optimize: optimize}
	return e, nil
}

// Close releases the sessions.
func (e *Export) Close() {
	if e.runner != nil {
		e.runner.Close()
	}
}

// Context is the longest sequence the export's caches hold.
func (e *Export) Context() int { return e.man.Context }

// Describe names the export.
func (e *Export) Describe() string {
	m := e.man
	return fmt.Sprintf("ONNX export %s (%s, %s layout, context %d) in ONNX Runtime %s, optimization %s", e.dir, m.DType, m.Layout, m.Context, ortrun.Version(), e.sopt.Optimize)
}

// Vocab is the manifest config's vocab_size.
func (e *Export) Vocab() int { return e.vocab }

func (e *Export) fits(ids []int) error {
	if len(ids) > e.Context() {
		return fmt.Errorf("%d tokens do not fit the export's context of %d (export with a larger --context, or eval with a smaller --ctx)", len(ids), e.Context())
	}
	return nil
}

// Logits decodes ids one token at a time from empty caches through a
// Runner holding every session, and returns the head's logits at
// positions first..len(ids)-1 (the plain definition Batch is tested
// against; eval itself runs batches).
func (e *Export) Logits(ids []int, first int) ([]float32, error) {
	if err := e.fits(ids); err != nil {
		return nil, err
	}
	if e.runner == nil {
		r, err := ortrun.OpenRunner(e.dir, ortrun.RunnerOptions{SessionOptions: e.sopt})
		if err != nil {
			return nil, err
		}
		e.runner = r
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

// LayerShape is the layer count and hidden size when every layer is its
// own graph (a --granularity block export hides the layers inside a block:
// 0 layers).
func (e *Export) LayerShape() (int, int) {
	n := 0
	for _, g := range e.man.Graphs {
		switch g.Kind {
		case onnxgraph.KindLayer:
			n++
		case onnxgraph.KindBlock:
			return 0, e.hidden
		}
	}
	return n, e.hidden
}

// Batch runs the requests graph-major (see the package doc): the embed
// graph over every token, then each layer graph over every position of
// every sequence, each sequence from empty caches, then the head at the
// positions asked for. visit gets each request's logits, and with
// Request.Layers each layer graph's hidden_out at those positions.
//
// Memory: one session's graph and weights, plus per sequence its residual
// between graphs (len(ids) x hidden values in the export's dtype) and one
// layer's caches, plus one sequence's logits.
func (e *Export) Batch(reqs []eval.Request, visit func(int, eval.Output) error) error {
	for s, r := range reqs {
		if err := e.fits(r.IDs); err != nil {
			return fmt.Errorf("sequence %d: %w", s, err)
		}
		if r.First < 0 || r.First >= len(r.IDs) {
			return fmt.Errorf("sequence %d: %d tokens, logits from %d", s, len(r.IDs), r.First)
		}
	}
	b := &batch{e: e, reqs: reqs, visit: visit, hs: make([][]onnxgraph.Tensor, len(reqs)), layers: make([][][]float32, len(reqs))}
	for _, g := range onnxgraph.GraphOrder(e.man) {
		if err := b.runGraph(g); err != nil {
			return fmt.Errorf("%s: %w", g.File, err)
		}
	}
	return nil
}

// batch is one graph-major run.
type batch struct {
	e      *Export
	reqs   []eval.Request
	visit  func(int, eval.Output) error
	hs     [][]onnxgraph.Tensor // per sequence and position: the residual entering the next graph
	layers [][][]float32        // per sequence asking for them: each layer's output
}

// runGraph opens graph g, runs every sequence through it and closes it.
func (b *batch) runGraph(g onnxgraph.GraphEntry) error {
	sess, err := ortrun.OpenSession(filepath.Join(b.e.dir, g.File), b.e.sopt)
	if err != nil {
		return err
	}
	defer sess.Close()
	for s, r := range b.reqs {
		var err error
		switch g.Kind {
		case onnxgraph.KindEmbed:
			err = b.embed(sess, s, r)
		case onnxgraph.KindHead:
			err = b.head(sess, s, r)
		default:
			err = b.layer(sess, g, s, r)
		}
		if err != nil {
			return fmt.Errorf("sequence %d: %w", s, err)
		}
	}
	return nil
}

func (b *batch) embed(sess *ortrun.Session, s int, r eval.Request) error {
	b.hs[s] = make([]onnxgraph.Tensor, len(r.IDs))
	for p, id := range r.IDs {
		out, err := sess.Run(map[string]onnxgraph.Tensor{"input_ids": onnxgraph.I64Tensor([]int64{1, 1}, []int64{int64(id)})})
		if err != nil {
			return fmt.Errorf("position %d: %w", p, err)
		}
		b.hs[s][p] = out["hidden_out"]
	}
	return nil
}

// layer runs sequence s through a layer or block graph from empty
// caches, as ortrun.Runner.Step feeds it at each position.
func (b *batch) layer(sess *ortrun.Session, g onnxgraph.GraphEntry, s int, r eval.Request) error {
	infos := g.LayerInfos()
	states := make([]*onnxgraph.CacheState, len(infos))
	rng := rand.New(rand.NewPCG(0, 0)) // unused: no garbage behind the masks
	for k, li := range infos {
		st, err := onnxgraph.NewCacheState(&g, li, rng, 0, 0)
		if err != nil {
			return err
		}
		states[k] = st
	}
	mv := float32(b.e.man.MaskValue)
	var kept []float32
	for p := range r.IDs {
		feeds := map[string]onnxgraph.Tensor{"hidden_in": b.hs[s][p]}
		for k, li := range infos {
			for name, v := range states[k].Feeds(b.e.dt, p, mv, onnxgraph.LayerSuffix(g.Kind, li.Layer)) {
				feeds[name] = v
			}
		}
		out, err := sess.Run(feeds)
		if err != nil {
			return fmt.Errorf("position %d: %w", p, err)
		}
		for k, li := range infos {
			if _, _, err := states[k].Update(out, p, onnxgraph.LayerSuffix(g.Kind, li.Layer)); err != nil {
				return fmt.Errorf("position %d: %w", p, err)
			}
		}
		b.hs[s][p] = out["hidden_out"]
		if r.Layers && p >= r.First {
			kept = append(kept, b.hs[s][p].Floats()...)
		}
	}
	if r.Layers && g.Kind == onnxgraph.KindLayer {
		b.layers[s] = append(b.layers[s], kept)
	}
	return nil
}

// head runs the head at sequence s's positions First.. and hands its
// logits to visit.
func (b *batch) head(sess *ortrun.Session, s int, r eval.Request) error {
	logits := make([]float32, 0, (len(r.IDs)-r.First)*b.e.vocab)
	for p := r.First; p < len(r.IDs); p++ {
		out, err := sess.Run(map[string]onnxgraph.Tensor{"hidden_in": b.hs[s][p]})
		if err != nil {
			return fmt.Errorf("position %d: %w", p, err)
		}
		l := out["logits"].Floats()
		if len(l) != b.e.vocab {
			return fmt.Errorf("position %d: head gave %d logits, vocab_size is %d", p, len(l), b.e.vocab)
		}
		logits = append(logits, l...)
	}
	b.hs[s] = nil
	out := eval.Output{Logits: logits}
	if r.Layers {
		out.Layers = b.layers[s]
	}
	b.layers[s] = nil
	return b.visit(s, out)
}
