// Package evalort drives an ONNX decode-step export in ONNX Runtime as an
// eval.Model, exactly as a phone runtime runs it: token by token through
// the embed graph, every layer graph with its ring or roll caches, masks and
// rope inputs (onnxgraph's host loop, written from the export contract
// alone), and the head. An export with prefill graphs (export-onnx
// --prefill) takes each sequence's context, the positions before the first
// scored one, through them in chunks (the last padded) and then decodes.
// Each sequence starts from empty caches. It needs cgo (ONNX Runtime);
// package eval itself does not.
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
	"time"

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
	// prefill is the prefill graphs' token count (0: none, or not used);
	// pre maps each decode graph's name to its prefill graph.
	prefill int
	pre     map[string]onnxgraph.GraphEntry
	// ran is the time spent in sessions' Run calls (sessions opening and
	// closing left out).
	ran time.Duration
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
	e := &Export{dir: dir, man: man, dt: dt, pre: onnxgraph.PrefillOf(man)}
	if man.Prefill != nil {
		e.prefill = man.Prefill.Tokens
	}
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
	how := "token by token"
	if e.prefill > 0 {
		how = fmt.Sprintf("context in %d-token prefill chunks, then token by token", e.prefill)
	}
	return fmt.Sprintf("ONNX export %s (%s, %s layout, context %d; %s) in ONNX Runtime %s, optimization %s", e.dir, m.DType, m.Layout, m.Context, how, ortrun.Version(), e.sopt.Optimize)
}

// UsePrefill turns the prefill graphs off (false: every position token by
// token) or back on; it reports whether they are used.
func (e *Export) UsePrefill(on bool) bool {
	e.prefill = 0
	if on && e.man.Prefill != nil {
		e.prefill = e.man.Prefill.Tokens
	}
	return e.prefill > 0
}

// RunTime is the time spent running graphs so far (sessions' Run calls
// only: what a runtime with every graph loaded spends).
func (e *Export) RunTime() time.Duration { return e.ran }

// run is sess.Run, timed into e.ran.
func (e *Export) run(sess *ortrun.Session, feeds map[string]onnxgraph.Tensor) (map[string]onnxgraph.Tensor, error) {
	t0 := time.Now()
	out, err := sess.Run(feeds)
	e.ran += time.Since(t0)
	return out, err
}

// Vocab is the manifest config's vocab_size.
func (e *Export) Vocab() int { return e.vocab }

func (e *Export) fits(ids []int) error {
	if len(ids) > e.Context() {
		return fmt.Errorf("%d tokens do not fit the export's context of %d (export with a larger --context, or eval with a smaller --ctx)", len(ids), e.Context())
	}
	return nil
}

// Logits runs ids from empty caches through a Runner holding every
// session, positions 0..first-1 through the prefill graphs when the export
// has them (and they are in use), the rest one token at a time, and returns
// the head's logits at positions first..len(ids)-1 (the plain definition
// Batch is tested against; eval itself runs batches).
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
	from := 0
	if e.prefill > 0 && first > 0 {
		prompt := make([]int64, first)
		for p := range prompt {
			prompt[p] = int64(ids[p])
		}
		if _, err := r.Prefill(prompt, 0); err != nil {
			return nil, err
		}
		from = first
	}
	for p := from; p < len(ids); p++ {
		id := ids[p]
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

// Prompt answers the prompt ids from empty caches as a runtime does before
// its first output token, graph by graph: every token through the prefill
// graphs in chunks when they are in use, else one at a time through the
// decode step; it returns the head's logits for the last token. With
// RunTime before and after, it is the time to first token of a runtime
// holding every graph loaded.
func (e *Export) Prompt(ids []int) ([]float32, error) {
	if err := e.fits(ids); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("prompt: no tokens")
	}
	var logits []float32
	reqs := []eval.Request{{IDs: ids, First: len(ids) - 1}}
	b := &batch{e: e, reqs: reqs, prompt: true, hs: make([][]onnxgraph.Tensor, 1), pads: make([][]onnxgraph.Tensor, 1), layers: make([][][]float32, 1),
		visit: func(_ int, out eval.Output) error { logits = out.Logits; return nil }}
	for _, g := range onnxgraph.GraphOrder(e.man) {
		if err := b.runGraph(g); err != nil {
			return nil, fmt.Errorf("%s: %w", g.File, err)
		}
	}
	return logits, nil
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
	b := &batch{e: e, reqs: reqs, visit: visit, hs: make([][]onnxgraph.Tensor, len(reqs)), pads: make([][]onnxgraph.Tensor, len(reqs)), layers: make([][][]float32, len(reqs))}
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
	pads   [][]onnxgraph.Tensor // per sequence: the last prefill chunk's padding rows, carried on as a runtime does
	layers [][][]float32        // per sequence asking for them: each layer's output
	// prompt: the whole sequence goes through the prefill graphs (Prompt).
	prompt bool
}

// prefilled is how many leading positions of r go through the prefill
// graphs: its context before the first scored position, or all of it for
// a prompt.
func (b *batch) prefilled(r eval.Request) int {
	switch {
	case b.e.prefill == 0:
		return 0
	case b.prompt:
		return len(r.IDs)
	}
	return r.First
}

// runGraph opens graph g, runs every sequence through it and closes it.
func (b *batch) runGraph(g onnxgraph.GraphEntry) error {
	sess, err := ortrun.OpenSession(filepath.Join(b.e.dir, g.File), b.e.sopt)
	if err != nil {
		return err
	}
	defer sess.Close()
	var pre *ortrun.Session
	if pg, ok := b.e.pre[g.Name]; ok && b.e.prefill > 0 {
		if pre, err = ortrun.OpenSession(filepath.Join(b.e.dir, pg.File), b.e.sopt); err != nil {
			return err
		}
		defer pre.Close()
	}
	for s, r := range b.reqs {
		var err error
		switch g.Kind {
		case onnxgraph.KindEmbed:
			err = b.embed(sess, pre, s, r)
		case onnxgraph.KindHead:
			err = b.head(sess, s, r)
		default:
			err = b.layer(sess, pre, g, s, r)
		}
		if err != nil {
			return fmt.Errorf("sequence %d: %w", s, err)
		}
	}
	return nil
}

func (b *batch) embed(sess, pre *ortrun.Session, s int, r eval.Request) error {
	b.hs[s] = make([]onnxgraph.Tensor, len(r.IDs))
	n := b.e.prefill
	for _, ch := range onnxgraph.Chunks(b.prefilled(r), n) {
		out, err := b.e.run(pre, map[string]onnxgraph.Tensor{"input_ids": onnxgraph.PrefillIDs(r.IDs, ch, n)})
		if err != nil {
			return fmt.Errorf("prefill at %d: %w", ch.Start, err)
		}
		b.keepRows(s, ch, splitRows(out["hidden_out"], n))
	}
	for p := b.prefilled(r); p < len(r.IDs); p++ {
		id := r.IDs[p]
		out, err := b.e.run(sess, map[string]onnxgraph.Tensor{"input_ids": onnxgraph.I64Tensor([]int64{1, 1}, []int64{int64(id)})})
		if err != nil {
			return fmt.Errorf("position %d: %w", p, err)
		}
		b.hs[s][p] = out["hidden_out"]
	}
	return nil
}

// layer runs sequence s through a layer or block graph from empty
// caches, as ortrun.Runner.Step feeds it at each position.
func (b *batch) layer(sess, pre *ortrun.Session, g onnxgraph.GraphEntry, s int, r eval.Request) error {
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
	n := b.e.prefill
	for _, ch := range onnxgraph.Chunks(b.prefilled(r), n) {
		rows := append(append([]onnxgraph.Tensor(nil), b.hs[s][ch.Start:ch.Start+ch.Valid]...), b.pads[s][:n-ch.Valid]...)
		feeds := map[string]onnxgraph.Tensor{"hidden_in": concatRows(rows)}
		for k, li := range infos {
			for name, v := range states[k].PrefillFeeds(b.e.dt, ch.Start, n, mv, onnxgraph.LayerSuffix(g.Kind, li.Layer)) {
				feeds[name] = v
			}
		}
		out, err := b.e.run(pre, feeds)
		if err != nil {
			return fmt.Errorf("prefill at %d: %w", ch.Start, err)
		}
		for k, li := range infos {
			if _, _, err := states[k].UpdatePrefill(out, ch.Start, n, ch.Valid, onnxgraph.LayerSuffix(g.Kind, li.Layer)); err != nil {
				return fmt.Errorf("prefill at %d: %w", ch.Start, err)
			}
		}
		b.keepRows(s, ch, splitRows(out["hidden_out"], n))
	}
	var kept []float32
	for p := b.prefilled(r); p < len(r.IDs); p++ {
		feeds := map[string]onnxgraph.Tensor{"hidden_in": b.hs[s][p]}
		for k, li := range infos {
			for name, v := range states[k].Feeds(b.e.dt, p, mv, onnxgraph.LayerSuffix(g.Kind, li.Layer)) {
				feeds[name] = v
			}
		}
		out, err := b.e.run(sess, feeds)
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
		out, err := b.e.run(sess, map[string]onnxgraph.Tensor{"hidden_in": b.hs[s][p]})
		if err != nil {
			return fmt.Errorf("position %d: %w", p, err)
		}
		l := out["logits"].Floats()
		if len(l) != b.e.vocab {
			return fmt.Errorf("position %d: head gave %d logits, vocab_size is %d", p, len(l), b.e.vocab)
		}
		logits = append(logits, l...)
	}
	b.hs[s], b.pads[s] = nil, nil
	out := eval.Output{Logits: logits}
	if r.Layers {
		out.Layers = b.layers[s]
	}
	b.layers[s] = nil
	return b.visit(s, out)
}

// keepRows stores a prefill chunk's output rows: the real ones as the
// residual of their positions, the padding ones (only the last chunk has
// them) apart.
func (b *batch) keepRows(s int, ch onnxgraph.Chunk, rows []onnxgraph.Tensor) {
	copy(b.hs[s][ch.Start:ch.Start+ch.Valid], rows[:ch.Valid])
	if ch.Valid < len(rows) {
		b.pads[s] = rows[ch.Valid:]
	}
}

// splitRows cuts a [1,n,H] tensor into n [1,1,H] rows (the same bits).
func splitRows(t onnxgraph.Tensor, n int) []onnxgraph.Tensor {
	h := t.Shape[len(t.Shape)-1]
	rows := make([]onnxgraph.Tensor, n)
	for i := range rows {
		r := onnxgraph.Tensor{DType: t.DType, Shape: []int64{1, 1, h}}
		if t.DType == onnxgraph.Float16 {
			r.F16 = t.F16[int64(i)*h : int64(i+1)*h]
		} else {
			r.F32 = t.F32[int64(i)*h : int64(i+1)*h]
		}
		rows[i] = r
	}
	return rows
}

// concatRows joins [1,1,H] rows into one [1,n,H] tensor (the same bits).
func concatRows(rows []onnxgraph.Tensor) onnxgraph.Tensor {
	h := rows[0].Shape[2]
	t := onnxgraph.Tensor{DType: rows[0].DType, Shape: []int64{1, int64(len(rows)), h}}
	for _, r := range rows {
		t.F16 = append(t.F16, r.F16...)
		t.F32 = append(t.F32, r.F32...)
	}
	return t
}
