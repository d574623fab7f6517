package forward

import (
	"fmt"
	"math"
	"os"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"sparkconv/dtype"
	"sparkconv/kernels"
	"sparkconv/spark"
)

// Options tune memory use; the zero value picks sensible defaults.
type Options struct {
	// CachedLayers is how many layers stay loaded at once (least recently
	// used is dropped first: its float32 weights are reused, the mapped
	// pages of its bf16 weights dropped). 0 chooses: all layers when their
	// float32 weights would fit in 2 GiB, else 2.
	CachedLayers int
	// HeadBlockRows is how many vocabulary rows of the head are widened to
	// float32 at a time. 0 chooses 32 MiB worth of rows, or the whole head
	// (kept) when every layer is cached and the head fits in 512 MiB.
	HeadBlockRows int
	// FamilyLinears runs the prefill's linear products (T > 1) at the
	// precision of the kernel family (kernels.LinearNT: avx512bf16 rounds
	// activations and weights to bf16), each weight packed for the kernels
	// once and kept until Layer.DropPacked or the layer's eviction (GPTQ's
	// calibration forward sets it, and drops a layer's packs after each
	// pass over its chunks, before it rewrites weights). Without it every
	// product is float32, as
	// verify's and eval's comparisons need, and nothing is kept.
	FamilyLinears bool
}

// residentBudget is the float32 size under which every layer stays cached.
const residentBudget = 2 << 30

// Model runs the reference forward of an opened Spark checkpoint.
type Model struct {
	W   Weights
	Cfg *spark.Config

	layers    *layerCache
	headRows  int       // rows of the head widened per block
	head      []float32 // the whole head in float32 when kept
	headBits  []uint16  // the head's bf16 bits in place, when stored so
	norm      []float32 // model.norm.weight
	embRaw    []byte
	embType   dtype.DType
	headRaw   []byte
	headType  dtype.DType
	headAct   Act // input rule of a quantized head
	ropeCache map[ropeKey]*ropeTable
	bufs      map[string][]float32 // work buffers, see scratch
	opt       Options
}

// Open opens the original checkpoint folder dir (spark.Open, which
// refuses a quantized one) and wraps it.
func Open(dir string, opt Options) (*Model, error) {
	sm, err := spark.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := New(sm, opt)
	if err != nil {
		sm.Close()
		return nil, err
	}
	return m, nil
}

// New wraps an opened original checkpoint. Nothing large is read yet.
func New(sm *spark.Model, opt Options) (*Model, error) {
	return NewWeights(CheckpointWeights{sm}, opt)
}

// NewWeights runs the forward on any Weights: an original checkpoint or a
// quantized output's reader. Nothing large is read yet, except a quantized
// head, which is dequantized once and kept.
func NewWeights(w Weights, opt Options) (*Model, error) {
	c := w.Config()
	m := &Model{W: w, Cfg: c, ropeCache: map[ropeKey]*ropeTable{}, bufs: map[string][]float32{}, opt: opt}
	m.norm = make([]float32, c.HiddenSize)
	if _, err := widenTensor(w, spark.NormName, m.norm, false); err != nil {
		return nil, err
	}
	dt, raw, ok, err := w.Float(spark.EmbedName)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s: the embedding %s is quantized; no sparkconv format does that", w.Describe(), spark.EmbedName)
	}
	m.embRaw, m.embType = raw, dt
	m.planMemory(opt)
	// Opening a tensor scans it for NaN/Inf, which maps every page of it;
	// a streamed model reads the embedding row by row and the head block
	// by block, so their pages are dropped again (the full model's tied
	// table is 512 MB).
	if m.streaming() {
		releasePages(raw)
	}
	if dt, raw, ok, err = w.Float(c.HeadWeight()); err != nil {
		return nil, err
	}
	if ok {
		m.headRaw, m.headType = raw, dt
		m.headBits, _ = bf16Tensor(w, c.HeadWeight(), c.VocabSize*c.HiddenSize)
		if m.headRows < c.VocabSize {
			releasePages(raw)
		}
		return m, nil
	}
	m.head = make([]float32, c.VocabSize*c.HiddenSize)
	if m.headAct, err = widenTensor(w, c.HeadWeight(), m.head, true); err != nil {
		return nil, err
	}
	m.headRows = c.VocabSize
	return m, nil
}

// planMemory applies Options: how many layers stay widened, and whether the
// head is kept whole or widened block by block.
func (m *Model) planMemory(opt Options) {
	c := m.Cfg
	n := opt.CachedLayers
	if n <= 0 {
		n = 2
		if int64(c.NumLayers)*layerParams(c)*4 <= residentBudget {
			n = c.NumLayers
		}
	}
	m.layers = &layerCache{cap: min(n, c.NumLayers)}
	headBytes := int64(c.VocabSize) * int64(c.HiddenSize) * 4
	switch {
	case opt.HeadBlockRows > 0:
		m.headRows = min(opt.HeadBlockRows, c.VocabSize)
	case !m.streaming() && headBytes <= 512<<20:
		m.headRows = c.VocabSize
	default:
		m.headRows = max(1, min(c.VocabSize, (32<<20)/(4*c.HiddenSize)))
	}
}

// Close releases the checkpoint.
func (m *Model) Close() error { return m.W.Close() }

// layerParams is the number of weights in one layer.
func layerParams(c *spark.Config) int64 {
	h, i := int64(c.HiddenSize), int64(c.IntermediateSize)
	return h*int64(c.QDim()+2*c.KVDim()) + h*int64(c.NumHeads) + int64(c.QDim())*h + 3*h*i + 2*h
}

// LayerFLOPs is the arithmetic of one layer's prefill over T tokens
// (2 per multiply-add): the six linears plus the attention products over
// the keys each query sees. Element-wise work is not counted.
func LayerFLOPs(c *spark.Config, layer, T int) float64 {
	h, i := float64(c.HiddenSize), float64(c.IntermediateSize)
	lin := 2 * float64(T) * (h*float64(c.QDim()+2*c.KVDim()) + h*float64(c.NumHeads) + float64(c.QDim())*h + 3*h*i)
	keys := 0.0
	for p := range T {
		lo := 0
		if c.IsSliding(layer) {
			lo = max(0, p-c.SlidingWindow+1)
		}
		keys += float64(p - lo + 1)
	}
	return lin + 4*keys*float64(c.NumHeads*c.HeadDim)
}

// Layer is one decoder layer's weights, row-major [out, in]. The forward
// multiplies bf16 linears in place, as the checkpoint maps them (the
// kernels widen each value exactly as they pack or load it, so no float32
// copy exists); the float32 fields hold the rest (norms, f16/f32 or
// dequantized weights) and, once Model.Layer asked for them, every linear.
type Layer struct {
	Index    int
	Sliding  bool
	InNorm   []float32 // [H] input_layernorm
	QKV      []float32 // [QD+2*KVD, H] rows q, then k, then v
	G        []float32 // [heads, H] g_proj, the head-wise output gate
	O        []float32 // [H, QD] o_proj
	PostNorm []float32 // [H] post_attention_layernorm
	Gate     []float32 // [I, H] mlp.gate_proj
	Up       []float32 // [I, H] mlp.up_proj
	Down     []float32 // [H, I] mlp.down_proj
	// Act is the input rule of each field's linear (fields order): the
	// zero Act (float32) unless the format quantized it.
	Act [8]Act

	familyLinears bool // Options.FamilyLinears of the model that loaded it
	// packed[k] is field k's weight packed for kernels.LinearNTPacked
	// (with familyLinears), made on first use.
	packed [8]*kernels.PackedNT

	// bf16[k] is field k's weight as stored bf16 bits (a view of the
	// mapped checkpoint, raw[k]) while its float32 field is empty.
	bf16 [8][]uint16
	raw  [8][]byte
}

func (l *Layer) fields() []*[]float32 {
	return []*[]float32{&l.InNorm, &l.QKV, &l.G, &l.O, &l.PostNorm, &l.Gate, &l.Up, &l.Down}
}

// matMul computes c[T, n] = a[T, k] @ W^T for the linear of field f, from
// its bf16 view or its float32 weights (the same values, the same sums),
// through the family's linear products when the model asked for them.
func (l *Layer) matMul(f int, c, a []float32, T, n, k int) {
	b := l.bf16[f]
	switch {
	case l.familyLinears && T > 1:
		p := l.packed[f]
		if p == nil && b != nil {
			p = kernels.PackNTBF16(b, n, k)
		} else if p == nil {
			p = kernels.PackNT(*l.fields()[f], n, k)
		}
		l.packed[f] = p
		kernels.LinearNTPacked(c, a, p, T)
	// Below: the plain products, which are also the family's for one
	// token (LinearNT is MatMulNT for m = 1).
	case b != nil:
		kernels.MatMulNTBF16(c, a, b, T, n, k)
	default:
		kernels.MatMulNT(c, a, *l.fields()[f], T, n, k)
	}
}

// Linear returns the float32 weights [out, in] of the layer's linear
// module (spark.QKV, spark.GateProj, ...), nil for a name that is not one.
func (l *Layer) Linear(module string) *[]float32 {
	w, _ := l.LinearAct(module)
	return w
}

// LinearAct returns the float32 weights [out, in] of the layer's linear
// module and its input rule, for a caller that replaces them (after
// Model.Layer); nil for a name that is not one.
func (l *Layer) LinearAct(module string) (*[]float32, *Act) {
	k := slices.Index(layerModules, module)
	if k < 0 || module == spark.InputNorm || module == spark.PostNorm {
		return nil, nil
	}
	return l.fields()[k], &l.Act[k]
}

var layerModules = []string{spark.InputNorm, spark.QKV, spark.GateProj, spark.OProj, spark.PostNorm, spark.MLPGate, spark.MLPUp, spark.MLPDown}

// DropPacked forgets the layer's packed weights (Options.FamilyLinears):
// a caller that rewrites a weight calls it before the next product.
func (l *Layer) DropPacked() { l.packed = [8]*kernels.PackedNT{} }

// layerCache keeps the most recently used layers, reusing an evicted
// layer's buffers for the next one so streaming does not grow the heap.
type layerCache struct {
	cap    int
	layers []*Layer // least recently used first
}

// Layer returns layer i's weights with every field in float32 (callers
// may read and rewrite them: GPTQ replaces a layer's linears by their
// dequantized codes before the propagation pass), widening them on first
// use. The returned weights stay valid until CachedLayers other layers are
// loaded, and the forward multiplies the float32 fields from then on.
func (m *Model) Layer(i int) (*Layer, error) {
	l, err := m.layer(i)
	if err != nil {
		return nil, err
	}
	l.DropPacked() // the caller may rewrite the weights
	for f, p := range l.fields() {
		b := l.bf16[f]
		if b == nil {
			continue
		}
		*p = grow(*p, len(b))
		if err := widen(*p, l.raw[f], dtype.BF16); err != nil {
			return nil, fmt.Errorf("%s: %w", spark.LayerWeight(i, layerModules[f]), err)
		}
		l.bf16[f] = nil
		if m.streaming() {
			releasePages(l.raw[f])
			l.raw[f] = nil
		}
	}
	return l, nil
}

// DropLayers forgets every cached layer and its buffers (dropping the
// pages of its bf16 views when streaming): for a caller that is done with
// the layers but not with the model (GPTQ before the head). A later
// forward loads layers again.
func (m *Model) DropLayers() {
	for _, l := range m.layers.layers {
		m.evict(l)
	}
	m.layers.layers = nil
	clear(m.bufs)
}

// layer returns layer i as the forward multiplies it (bf16 linears in
// place), loading it on first use.
func (m *Model) layer(i int) (*Layer, error) {
	if i < 0 || i >= m.Cfg.NumLayers {
		return nil, fmt.Errorf("layer %d out of range (model has %d layers)", i, m.Cfg.NumLayers)
	}
	lc := m.layers
	for k, l := range lc.layers {
		if l.Index == i {
			lc.layers = append(append(lc.layers[:k:k], lc.layers[k+1:]...), l)
			return l, nil
		}
	}
	l := &Layer{}
	if len(lc.layers) >= lc.cap {
		l = lc.layers[0]
		lc.layers = lc.layers[1:]
		m.evict(l)
	}
	if err := m.loadLayer(l, i); err != nil {
		return nil, err
	}
	lc.layers = append(lc.layers, l)
	return l, nil
}

// evict forgets an evicted layer's bf16 views, dropping their pages when
// streaming; its float32 buffers are kept for the next layer.
func (m *Model) evict(l *Layer) {
	for f, raw := range l.raw {
		if raw != nil && m.streaming() {
			releasePages(raw)
		}
		l.raw[f], l.bf16[f] = nil, nil
	}
}

func (m *Model) loadLayer(l *Layer, i int) error {
	l.Index, l.Sliding, l.familyLinears = i, m.Cfg.IsSliding(i), m.opt.FamilyLinears
	l.DropPacked()
	sizes := layerSizes(m.Cfg)
	for k, f := range l.fields() {
		name := spark.LayerWeight(i, layerModules[k])
		n := sizes[k]
		if k != 0 && k != 4 { // a linear: multiply bf16 in place when stored so
			if b, raw := bf16Tensor(m.W, name, n); b != nil {
				l.bf16[k], l.raw[k], l.Act[k] = b, raw, Act{}
				*f = (*f)[:0]
				continue
			}
		}
		*f = grow(*f, n)
		act, err := widenTensor(m.W, name, *f, m.streaming())
		if err != nil {
			return fmt.Errorf("%s: %w", m.W.Describe(), err)
		}
		l.Act[k] = act
	}
	return nil
}

// grow returns s resized to n values, reallocated only when too small.
func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// layerSizes is the number of values of each Layer field.
func layerSizes(c *spark.Config) [8]int {
	h, in, qd := c.HiddenSize, c.IntermediateSize, c.QDim()
	return [8]int{h, (qd + 2*c.KVDim()) * h, c.NumHeads * h, h * qd, h, in * h, in * h, h * in}
}

// Layer field indexes (Layer.Act).
const (
	actQKV  = 1
	actG    = 2
	actO    = 3
	actGate = 5
	actUp   = 6
	actDown = 7
)

// streaming reports whether layers are evicted (the model is too large to
// keep): then the mapped checkpoint pages are released after widening.
func (m *Model) streaming() bool { return m.layers.cap < m.Cfg.NumLayers }

// releasePages drops the whole pages of a slice of the read-only checkpoint
// mapping from this process (madvise MADV_DONTNEED): the data stays in the
// page cache and is faulted back in if read again, but the process's
// resident set no longer counts it. Without this, streaming the full
// model would show its whole 3.4 GB file in RSS.
func releasePages(b []byte) {
	if len(b) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := int((page - addr%page) % page)
	hi := len(b) - int((addr+uintptr(len(b)))%page)
	if hi > lo {
		_ = unix.Madvise(b[lo:hi], unix.MADV_DONTNEED)
	}
}

// widen converts raw float data to float32 on all cores.
func widen(dst []float32, raw []byte, dt dtype.DType) error {
	size := dt.Size()
	if !dt.IsFloat() || len(raw) != len(dst)*size {
		return fmt.Errorf("cannot read %d bytes of %s as %d float32 values", len(raw), dt, len(dst))
	}
	const grain = 1 << 16
	var err error
	kernels.Parallel((len(dst)+grain-1)/grain, func(lo, hi int) {
		a, b := lo*grain, min(hi*grain, len(dst))
		if e := dtype.ToFloat32(dst[a:b], raw[a*size:b*size], dt); e != nil {
			err = e
		}
	})
	return err
}

// Embed returns the embedding rows of ids, [T, H] (no scaling).
func (m *Model) Embed(ids []int) ([]float32, error) {
	h := m.Cfg.HiddenSize
	x := make([]float32, len(ids)*h)
	for t, id := range ids {
		if err := m.EmbedRow(x[t*h:(t+1)*h], id); err != nil {
			return nil, fmt.Errorf("position %d: %w", t, err)
		}
	}
	return x, nil
}

// EmbedRow writes embed_tokens[id] into dst [H].
func (m *Model) EmbedRow(dst []float32, id int) error {
	if id < 0 || id >= m.Cfg.VocabSize {
		return fmt.Errorf("token id %d out of range (vocab_size %d)", id, m.Cfg.VocabSize)
	}
	h, sz := m.Cfg.HiddenSize, m.embType.Size()
	return dtype.ToFloat32(dst[:h], m.embRaw[id*h*sz:(id+1)*h*sz], m.embType)
}

// FinalNorm returns rmsnorm(x) * model.norm.weight for x [T, H].
func (m *Model) FinalNorm(x []float32) []float32 {
	out := make([]float32, len(x))
	m.rmsNorm(out, x, m.norm)
	return out
}

func (m *Model) rmsNorm(out, x, w []float32) {
	h := len(w)
	eps := float32(m.Cfg.RMSNormEps)
	kernels.Parallel(len(x)/h, func(lo, hi int) {
		kernels.RMSNorm(out[lo*h:hi*h], x[lo*h:hi*h], w, eps)
	})
}

// HeadBlocks runs the output head over fn [T, H] one block of vocabulary
// rows at a time: for each block [v0, v1) it calls visit with the logits
// [T, v1-v0] of those rows (valid only during the call).
func (m *Model) HeadBlocks(fn []float32, T int, visit func(v0, v1 int, logits []float32)) error {
	c := m.Cfg
	h, V := c.HiddenSize, c.VocabSize
	if m.headRows >= V && m.head == nil && m.headBits == nil {
		m.head = make([]float32, V*h)
		if err := widen(m.head, m.headRaw, m.headType); err != nil {
			m.head = nil
			return fmt.Errorf("head %s: %w", c.HeadWeight(), err)
		}
	}
	fn = m.actIn(m.headAct, fn, h)
	var w []float32
	if m.head == nil && m.headBits == nil {
		w = make([]float32, m.headRows*h)
	}
	out := make([]float32, T*m.headRows)
	for v0 := 0; v0 < V; v0 += m.headRows {
		v1 := min(v0+m.headRows, V)
		nb := v1 - v0
		if m.headBits != nil {
			kernels.MatMulNTBF16(out[:T*nb], fn, m.headBits[v0*h:v1*h], T, nb, h)
			if m.headRows < V {
				releasePages(m.headRaw[v0*h*2 : v1*h*2])
			}
			visit(v0, v1, out[:T*nb])
			continue
		}
		wb, err := m.headRowsF32(w, v0, v1)
		if err != nil {
			return err
		}
		kernels.MatMulNT(out[:T*nb], fn, wb, T, nb, h)
		visit(v0, v1, out[:T*nb])
	}
	return nil
}

// headRowsF32 returns head rows [v0, v1) in float32: a slice of the kept
// head, or widened into buf.
func (m *Model) headRowsF32(buf []float32, v0, v1 int) ([]float32, error) {
	h, sz := m.Cfg.HiddenSize, m.headType.Size()
	if m.head != nil {
		return m.head[v0*h : v1*h], nil
	}
	wb := buf[:(v1-v0)*h]
	raw := m.headRaw[v0*h*sz : v1*h*sz]
	if err := widen(wb, raw, m.headType); err != nil {
		return nil, fmt.Errorf("head %s rows %d..%d: %w", m.Cfg.HeadWeight(), v0, v1, err)
	}
	releasePages(raw)
	return wb, nil
}

// Logits returns fn [T, H] @ head^T, [T, V].
func (m *Model) Logits(fn []float32, T int) ([]float32, error) {
	return m.observedLogits(fn, T, nil)
}

// gelu applies the MLP activation of the config in place on all cores.
func (m *Model) gelu(x []float32) {
	tanh := m.Cfg.TanhGELU()
	const grain = 1 << 14
	kernels.Parallel((len(x)+grain-1)/grain, func(lo, hi int) {
		s := x[lo*grain : min(hi*grain, len(x))]
		if tanh {
			geluTanh(s)
		} else {
			kernels.GELUErf(s)
		}
	})
}

// geluTanh is PyTorch's gelu(approximate="tanh"), evaluated in float64.
func geluTanh(x []float32) {
	k := math.Sqrt(2 / math.Pi)
	for i, v := range x {
		f := float64(v)
		x[i] = float32(0.5 * f * (1 + math.Tanh(k*(f+0.044715*f*f*f))))
	}
}
