package ortrun

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
)

// RunnerOptions tune a Runner.
type RunnerOptions struct {
	SessionOptions
	// KeyGarbage and ValueGarbage fill never-written cache slots with
	// uniform random values in [-g, g] (seeded by Seed), which the mask must
	// hide; 0 leaves them zero.
	KeyGarbage, ValueGarbage float64
	Seed                     uint64
}

// Runner is a decode-step runtime written from the contract alone: it
// reads manifest.json, builds rope_cos/rope_sin and the masks, owns the KV
// caches (ring: writes slot p mod C; roll: feeds present_* back) and runs
// embed, every layer or block graph, and head in ONNX Runtime.
type Runner struct {
	Manifest *onnxgraph.Manifest
	Dir      string
	dt       onnxgraph.DType
	embed    *Session
	head     *Session
	graphs   []*graphRun
	states   map[int]*onnxgraph.CacheState
	clone    bool // shares another Runner's sessions; Close leaves them
	// embedPre is the embed graph's prefill graph (nil without them).
	embedPre *Session
}

type graphRun struct {
	entry onnxgraph.GraphEntry
	sess  *Session
	// pre is the graph's prefill graph (nil without them).
	pre *Session
}

// StepTrace is what one decode step produced.
type StepTrace struct {
	// HiddenIn is the residual entering each layer that starts a graph
	// (every layer for layer graphs, 4k for blocks).
	HiddenIn map[int][]float32
	// Key and Value are each layer's new entry, [KV*D] (key after RoPE).
	Key, Value map[int][]float32
	HiddenOut  []float32 // input of the head
	Logits     []float32
}

// OpenRunner loads every graph of the export in dir.
func OpenRunner(dir string, opt RunnerOptions) (*Runner, error) {
	man, err := onnxgraph.ReadVerified(dir)
	if err != nil {
		return nil, err
	}
	dt, err := onnxgraph.ParseDType(man.DType)
	if err != nil {
		return nil, err
	}
	r := &Runner{Manifest: man, Dir: dir, dt: dt, states: map[int]*onnxgraph.CacheState{}}
	rng := rand.New(rand.NewPCG(opt.Seed, 0x5eed))
	pre := onnxgraph.PrefillOf(man)
	for _, g := range man.Graphs {
		s, err := OpenSession(filepath.Join(dir, g.File), opt.SessionOptions)
		if err != nil {
			r.Close()
			return nil, err
		}
		var ps *Session
		if pg, ok := pre[g.Name]; ok {
			if ps, err = OpenSession(filepath.Join(dir, pg.File), opt.SessionOptions); err != nil {
				s.Close()
				r.Close()
				return nil, err
			}
		}
		switch g.Kind {
		case onnxgraph.KindEmbed:
			r.embed, r.embedPre = s, ps
		case onnxgraph.KindHead:
			r.head = s
		default:
			r.graphs = append(r.graphs, &graphRun{entry: g, sess: s, pre: ps})
			for _, li := range g.LayerInfos() {
				st, err := onnxgraph.NewCacheState(&g, li, rng, opt.KeyGarbage, opt.ValueGarbage)
				if err != nil {
					r.Close()
					return nil, err
				}
				r.states[li.Layer] = st
			}
		}
	}
	if r.embed == nil || r.head == nil {
		r.Close()
		return nil, fmt.Errorf("%s: export lacks an embed or head graph", dir)
	}
	return r, nil
}

// Clone returns a Runner that shares r's sessions (no second copy of the
// weights) with its own copy of the caches as they are now. Closing the
// clone releases nothing; it must not outlive r.
func (r *Runner) Clone() *Runner {
	c := *r
	c.clone = true
	c.states = map[int]*onnxgraph.CacheState{}
	for i, st := range r.states {
		c.states[i] = st.Clone()
	}
	return &c
}

// Close releases every session.
func (r *Runner) Close() {
	if r.clone {
		return
	}
	for _, s := range []*Session{r.embed, r.embedPre, r.head} {
		if s != nil {
			s.Close()
		}
	}
	for _, g := range r.graphs {
		g.sess.Close()
		if g.pre != nil {
			g.pre.Close()
		}
	}
}

// CheckFiles compares the manifest with the files: each graph's SHA-256,
// and its inputs and outputs (names, shapes, dtypes, in order) with what
// ONNX Runtime reads from the file. It returns one line per mismatch.
func (r *Runner) CheckFiles() ([]string, error) {
	var bad []string
	for _, g := range r.Manifest.AllGraphs() {
		h, err := onnxio.HashFile(filepath.Join(r.Dir, g.File))
		if err != nil {
			return nil, err
		}
		if h.SHA256 != g.SHA256 {
			bad = append(bad, fmt.Sprintf("%s: sha256 %s, manifest says %s", g.File, h.SHA256, g.SHA256))
		}
		s := r.Session(g.File)
		bad = append(bad, CompareIO(g.File+" inputs", g.Inputs, s.Inputs)...)
		bad = append(bad, CompareIO(g.File+" outputs", g.Outputs, s.Outputs)...)
	}
	return bad, nil
}

func CompareIO(what string, want []onnxgraph.TensorSpec, got []onnxgraph.ValueInfo) []string {
	if len(want) != len(got) {
		return []string{fmt.Sprintf("%s: manifest lists %d, the graph has %d", what, len(want), len(got))}
	}
	var bad []string
	for i, w := range want {
		g := got[i]
		if w.Name != g.Name || w.DType != g.DType.String() || !slices.Equal(w.Shape, g.Shape) {
			bad = append(bad, fmt.Sprintf("%s[%d]: manifest %s %s %v, graph %s %s %v", what, i, w.Name, w.DType, w.Shape, g.Name, g.DType, g.Shape))
		}
	}
	return bad
}

// Session returns the session of a graph file of the export (nil if none).
func (r *Runner) Session(file string) *Session {
	switch {
	case r.embed != nil && file == r.entry(onnxgraph.KindEmbed).File:
		return r.embed
	case r.head != nil && file == r.entry(onnxgraph.KindHead).File:
		return r.head
	}
	pre := onnxgraph.PrefillOf(r.Manifest)
	if r.embedPre != nil && file == pre[r.entry(onnxgraph.KindEmbed).Name].File {
		return r.embedPre
	}
	for _, g := range r.graphs {
		if g.entry.File == file {
			return g.sess
		}
		if g.pre != nil && file == pre[g.entry.Name].File {
			return g.pre
		}
	}
	return nil
}

func (r *Runner) entry(kind string) onnxgraph.GraphEntry {
	for _, g := range r.Manifest.Graphs {
		if g.Kind == kind {
			return g
		}
	}
	return onnxgraph.GraphEntry{}
}

// Step runs token id at position p through every graph.
func (r *Runner) Step(id int64, p int) (*StepTrace, error) {
	tr := &StepTrace{HiddenIn: map[int][]float32{}, Key: map[int][]float32{}, Value: map[int][]float32{}}
	out, err := r.embed.Run(map[string]onnxgraph.Tensor{"input_ids": onnxgraph.I64Tensor([]int64{1, 1}, []int64{id})})
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	hidden := out["hidden_out"]
	mv := float32(r.Manifest.MaskValue)
	for _, g := range r.graphs {
		infos := g.entry.LayerInfos()
		tr.HiddenIn[infos[0].Layer] = hidden.Floats()
		feeds := map[string]onnxgraph.Tensor{"hidden_in": hidden}
		for _, li := range infos {
			for k, v := range r.states[li.Layer].Feeds(r.dt, p, mv, onnxgraph.LayerSuffix(g.entry.Kind, li.Layer)) {
				feeds[k] = v
			}
		}
		out, err := g.sess.Run(feeds)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", g.entry.File, err)
		}
		for _, li := range infos {
			k, v, err := r.states[li.Layer].Update(out, p, onnxgraph.LayerSuffix(g.entry.Kind, li.Layer))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", g.entry.File, err)
			}
			tr.Key[li.Layer], tr.Value[li.Layer] = k, v
		}
		hidden = out["hidden_out"]
	}
	tr.HiddenOut = hidden.Floats()
	out, err = r.head.Run(map[string]onnxgraph.Tensor{"hidden_in": hidden})
	if err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	tr.Logits = out["logits"].Floats()
	return tr, nil
}

// HasPrefill reports whether the export has prefill graphs.
func (r *Runner) HasPrefill() bool { return r.Manifest.Prefill != nil }

// Prefill runs the prompt ids at positions start.. through the prefill
// graphs, the manifest's prefill tokens at a time (the last chunk padded
// with token 0, its padding rows dropped), storing every prompt token's
// cache entries, and returns the trace of the prompt's last token: the
// head's input and logits (the first token to generate). The caches must
// hold exactly positions 0..start-1, as Step and Prefill leave them.
func (r *Runner) Prefill(ids []int64, start int) (*StepTrace, error) {
	if !r.HasPrefill() {
		return nil, fmt.Errorf("%s: the export has no prefill graphs (export-onnx --prefill)", r.Dir)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("prefill: no tokens")
	}
	n := r.Manifest.Prefill.Tokens
	prompt := make([]int, len(ids))
	for i, id := range ids {
		prompt[i] = int(id)
	}
	mv := float32(r.Manifest.MaskValue)
	var last []float32
	for _, ch := range onnxgraph.Chunks(len(ids), n) {
		p := start + ch.Start
		out, err := r.embedPre.Run(map[string]onnxgraph.Tensor{"input_ids": onnxgraph.PrefillIDs(prompt, ch, n)})
		if err != nil {
			return nil, fmt.Errorf("embed prefill at %d: %w", p, err)
		}
		hidden := out["hidden_out"]
		for _, g := range r.graphs {
			feeds := map[string]onnxgraph.Tensor{"hidden_in": hidden}
			for _, li := range g.entry.LayerInfos() {
				for k, v := range r.states[li.Layer].PrefillFeeds(r.dt, p, n, mv, onnxgraph.LayerSuffix(g.entry.Kind, li.Layer)) {
					feeds[k] = v
				}
			}
			out, err := g.pre.Run(feeds)
			if err != nil {
				return nil, fmt.Errorf("%s prefill at %d: %w", g.entry.File, p, err)
			}
			for _, li := range g.entry.LayerInfos() {
				if _, _, err := r.states[li.Layer].UpdatePrefill(out, p, n, ch.Valid, onnxgraph.LayerSuffix(g.entry.Kind, li.Layer)); err != nil {
					return nil, fmt.Errorf("%s: %w", g.entry.File, err)
				}
			}
			hidden = out["hidden_out"]
		}
		h := hidden.Floats()
		w := len(h) / n
		last = h[(ch.Valid-1)*w : ch.Valid*w]
	}
	tr := &StepTrace{HiddenOut: last}
	out, err := r.head.Run(map[string]onnxgraph.Tensor{"hidden_in": onnxgraph.FloatTensor(r.dt, []int64{1, 1, int64(len(last))}, last)})
	if err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	tr.Logits = out["logits"].Floats()
	return tr, nil
}
