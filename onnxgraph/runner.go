package onnxgraph

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
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
	Manifest *Manifest
	Dir      string
	dt       DType
	embed    *Session
	head     *Session
	graphs   []*graphRun
	states   map[int]*CacheState
	clone    bool // shares another Runner's sessions; Close leaves them
}

type graphRun struct {
	entry GraphEntry
	sess  *Session
}

// CacheState is one layer's KV cache as the runtime holds it, in the graph
// layouts: Key [KV, D, C], Value [KV, C, D].
type CacheState struct {
	Info       LayerInfo
	KV, D      int
	Key, Value []float32
	// Written marks ring slots that hold a real entry; for roll the real
	// entries are the last Filled slots.
	Written []bool
	Filled  int
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
	man, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	dt, err := ParseDType(man.DType)
	if err != nil {
		return nil, err
	}
	r := &Runner{Manifest: man, Dir: dir, dt: dt, states: map[int]*CacheState{}}
	rng := rand.New(rand.NewPCG(opt.Seed, 0x5eed))
	for _, g := range man.Graphs {
		s, err := OpenSession(filepath.Join(dir, g.File), opt.SessionOptions)
		if err != nil {
			r.Close()
			return nil, err
		}
		switch g.Kind {
		case KindEmbed:
			r.embed = s
		case KindHead:
			r.head = s
		default:
			r.graphs = append(r.graphs, &graphRun{entry: g, sess: s})
			for _, li := range g.LayerInfos() {
				st, err := newCacheState(&g, li, rng, opt)
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

func newCacheState(g *GraphEntry, li LayerInfo, rng *rand.Rand, opt RunnerOptions) (*CacheState, error) {
	sfx := LayerSuffix(g.Kind, li.Layer)
	pk, ok := g.Tensor("past_key" + sfx)
	if !ok || len(pk.Shape) != 4 || pk.Shape[3] != int64(li.CacheSlots) {
		return nil, fmt.Errorf("%s: layer %d: past_key%s missing or not [1,KV,D,%d]", g.File, li.Layer, sfx, li.CacheSlots)
	}
	st := &CacheState{Info: li, KV: int(pk.Shape[1]), D: int(pk.Shape[2])}
	n := st.KV * st.D * li.CacheSlots
	st.Key, st.Value = make([]float32, n), make([]float32, n)
	for i := range n {
		st.Key[i] = float32(opt.KeyGarbage * (2*rng.Float64() - 1))
		st.Value[i] = float32(opt.ValueGarbage * (2*rng.Float64() - 1))
	}
	st.Written = make([]bool, li.CacheSlots)
	return st, nil
}

// Clone returns a Runner that shares r's sessions (no second copy of the
// weights) with its own copy of the caches as they are now. Closing the
// clone releases nothing; it must not outlive r.
func (r *Runner) Clone() *Runner {
	c := *r
	c.clone = true
	c.states = map[int]*CacheState{}
	for i, st := range r.states {
		cp := *st
		cp.Key = append([]float32(nil), st.Key...)
		cp.Value = append([]float32(nil), st.Value...)
		cp.Written = append([]bool(nil), st.Written...)
		c.states[i] = &cp
	}
	return &c
}

// Close releases every session.
func (r *Runner) Close() {
	if r.clone {
		return
	}
	for _, s := range []*Session{r.embed, r.head} {
		if s != nil {
			s.Close()
		}
	}
	for _, g := range r.graphs {
		g.sess.Close()
	}
}

// CheckFiles compares the manifest with the files: each graph's SHA-256,
// and its inputs and outputs (names, shapes, dtypes, in order) with what
// ONNX Runtime reads from the file. It returns one line per mismatch.
func (r *Runner) CheckFiles() ([]string, error) {
	var bad []string
	for _, g := range r.Manifest.Graphs {
		h, err := HashFile(filepath.Join(r.Dir, g.File))
		if err != nil {
			return nil, err
		}
		if h.SHA256 != g.SHA256 {
			bad = append(bad, fmt.Sprintf("%s: sha256 %s, manifest says %s", g.File, h.SHA256, g.SHA256))
		}
		s := r.Session(g.File)
		bad = append(bad, compareIO(g.File+" inputs", g.Inputs, s.Inputs)...)
		bad = append(bad, compareIO(g.File+" outputs", g.Outputs, s.Outputs)...)
	}
	return bad, nil
}

func compareIO(what string, want []TensorSpec, got []ValueInfo) []string {
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
	case r.embed != nil && file == r.entry(KindEmbed).File:
		return r.embed
	case r.head != nil && file == r.entry(KindHead).File:
		return r.head
	}
	for _, g := range r.graphs {
		if g.entry.File == file {
			return g.sess
		}
	}
	return nil
}

func (r *Runner) entry(kind string) GraphEntry {
	for _, g := range r.Manifest.Graphs {
		if g.Kind == kind {
			return g
		}
	}
	return GraphEntry{}
}

// State returns layer i's cache.
func (r *Runner) State(i int) *CacheState { return r.states[i] }

// RoPEInputs returns rope_cos and rope_sin [R/2] for position p:
// angle_j = p * theta^(-2j/R), computed in float64, rounded once.
func RoPEInputs(p int, theta float64, r int) (cos, sin []float32) {
	cos, sin = make([]float32, r/2), make([]float32, r/2)
	for j := range cos {
		a := float64(p) * math.Pow(theta, -float64(2*j)/float64(r))
		s, c := math.Sincos(a)
		cos[j], sin[j] = float32(c), float32(s)
	}
	return cos, sin
}

// Mask returns the additive mask [C+1] for the cache's current contents.
func (st *CacheState) Mask(maskValue float32) []float32 {
	c := st.Info.CacheSlots
	m := make([]float32, c+1)
	for s := range c {
		var real bool
		if st.Info.Layout == LayoutRoll {
			real = s >= c-st.Filled
		} else {
			real = st.Written[s]
		}
		if !real {
			m[s] = maskValue
		}
	}
	return m
}

// Feeds returns the layer's inputs (except hidden_in) at position p.
func (st *CacheState) Feeds(dt DType, p int, maskValue float32, sfx string) map[string]Tensor {
	li, kv, d := st.Info, int64(st.KV), int64(st.D)
	c := int64(li.CacheSlots)
	cos, sin := RoPEInputs(p, li.RopeTheta, li.RotaryDims)
	half := int64(li.RotaryDims / 2)
	return map[string]Tensor{
		"rope_cos" + sfx:       FloatTensor(dt, []int64{1, 1, half}, cos),
		"rope_sin" + sfx:       FloatTensor(dt, []int64{1, 1, half}, sin),
		"past_key" + sfx:       FloatTensor(dt, []int64{1, kv, d, c}, st.Key),
		"past_value" + sfx:     FloatTensor(dt, []int64{1, kv, c, d}, st.Value),
		"attention_mask" + sfx: FloatTensor(dt, []int64{1, 1, 1, c + 1}, st.Mask(maskValue)),
	}
}

// Update stores the step's outputs into the cache and returns the new
// entry (key [KV*D], value [KV*D]).
func (st *CacheState) Update(out map[string]Tensor, p int, sfx string) (key, value []float32, err error) {
	c, kv, d := st.Info.CacheSlots, st.KV, st.D
	key, value = make([]float32, kv*d), make([]float32, kv*d)
	if st.Info.Layout == LayoutRing {
		nk, ok1 := out["new_key"+sfx]
		nv, ok2 := out["new_value"+sfx]
		if !ok1 || !ok2 {
			return nil, nil, fmt.Errorf("layer %d: no new_key%s/new_value%s output", st.Info.Layer, sfx, sfx)
		}
		copy(key, nk.Floats())
		copy(value, nv.Floats())
		slot := p % c
		for h := range kv {
			for j := range d {
				st.Key[(h*d+j)*c+slot] = key[h*d+j]
				st.Value[(h*c+slot)*d+j] = value[h*d+j]
			}
		}
		st.Written[slot] = true
		return key, value, nil
	}
	pk, ok1 := out["present_key"+sfx]
	pv, ok2 := out["present_value"+sfx]
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("layer %d: no present_key%s/present_value%s output", st.Info.Layer, sfx, sfx)
	}
	copy(st.Key, pk.Floats())
	copy(st.Value, pv.Floats())
	st.Filled = min(st.Filled+1, c)
	for h := range kv {
		for j := range d {
			key[h*d+j] = st.Key[(h*d+j)*c+c-1]
			value[h*d+j] = st.Value[(h*c+c-1)*d+j]
		}
	}
	return key, value, nil
}

// Step runs token id at position p through every graph.
func (r *Runner) Step(id int64, p int) (*StepTrace, error) {
	tr := &StepTrace{HiddenIn: map[int][]float32{}, Key: map[int][]float32{}, Value: map[int][]float32{}}
	out, err := r.embed.Run(map[string]Tensor{"input_ids": I64Tensor([]int64{1, 1}, []int64{id})})
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	hidden := out["hidden_out"]
	mv := float32(r.Manifest.MaskValue)
	for _, g := range r.graphs {
		infos := g.entry.LayerInfos()
		tr.HiddenIn[infos[0].Layer] = hidden.Floats()
		feeds := map[string]Tensor{"hidden_in": hidden}
		for _, li := range infos {
			for k, v := range r.states[li.Layer].Feeds(r.dt, p, mv, LayerSuffix(g.entry.Kind, li.Layer)) {
				feeds[k] = v
			}
		}
		out, err := g.sess.Run(feeds)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", g.entry.File, err)
		}
		for _, li := range infos {
			k, v, err := r.states[li.Layer].Update(out, p, LayerSuffix(g.entry.Kind, li.Layer))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", g.entry.File, err)
			}
			tr.Key[li.Layer], tr.Value[li.Layer] = k, v
		}
		hidden = out["hidden_out"]
	}
	tr.HiddenOut = hidden.Floats()
	out, err = r.head.Run(map[string]Tensor{"hidden_in": hidden})
	if err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	tr.Logits = out["logits"].Floats()
	return tr, nil
}
