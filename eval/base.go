package eval

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"unsafe"

	"sparkconv/dtype"
	"sparkconv/outdir"
	"sparkconv/safetensors"
)

// The base log-probs file (--base-logits) is a safetensors file holding
// what the build is compared against, so evaluating several builds runs
// the original once:
//
//	ids          I64 [windows*ctx]       the windows' tokens
//	logprobs.{w} F32 [ctx-1-ctx/2, V]    window w's log-probabilities at
//	                                     the scored positions
//	prompts      I64 [n, promptLen]      the greedy prompts (n > 0)
//	greedy       I64 [n, gen]            the base's greedy continuations
//	layers       F32 [L, count, H]       the residual leaving each layer at
//	                                     window 0's scored positions (when
//	                                     the base is the reference forward)
//
// with metadata format, ctx, vocab, base (what the base was) and source
// (the text). Log-probabilities are kept in float32, not quantized to 16
// bits as llama.cpp does, so a build identical to the base scores exactly 0.
const baseFormat = "sparkconv-eval-base/1"

// BaseLogits is an opened base log-probs file.
type BaseLogits struct {
	Path    string
	Ctx     int
	Vocab   int
	Base    string // the base model's description
	Source  string
	IDs     []int
	Prompts [][]int
	Greedy  [][]int
	f       *safetensors.File
}

// Windows is the number of windows the file holds.
func (b *BaseLogits) Windows() int { return len(b.IDs) / b.Ctx }

// LogProbs returns window w's stored log-probabilities [count*V] (a view
// of the mapped file).
func (b *BaseLogits) LogProbs(w int) ([]float32, error) {
	info, raw, err := b.f.Raw("logprobs." + strconv.Itoa(w))
	if err != nil {
		return nil, err
	}
	_, count := Scored(b.Ctx)
	if info.DType != dtype.F32 || !slices.Equal(info.Shape, []int64{int64(count), int64(b.Vocab)}) {
		return nil, fmt.Errorf("%s: logprobs.%d is %s%v, want F32[%d %d]", b.Path, w, info.DType, info.Shape, count, b.Vocab)
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(raw))), len(raw)/4), nil
}

// Release drops window w's pages once scored.
func (b *BaseLogits) Release(w int) { b.f.Release("logprobs." + strconv.Itoa(w)) }

// Close unmaps the file.
func (b *BaseLogits) Close() error { return b.f.Close() }

// BaseOwner is the outdir.Owner of base log-probs files: a safetensors
// file whose metadata format is this package's.
var BaseOwner = safetensors.MetadataOwner("format", baseFormat)

// WriteBase runs the base over text's windows and greedy prompts and writes
// out (outdir.File's rules: atomic, an existing file replaced only as out
// allows).
func WriteBase(out *outdir.File, base Model, text *Text, opt Settings) error {
	windows := text.Windows(opt.Ctx)
	if windows == 0 {
		return fmt.Errorf("%s: %d tokens, fewer than one window of --ctx %d", text.Source, len(text.Stream), opt.Ctx)
	}
	_, count := Scored(opt.Ctx)
	V := base.Vocab()
	prompts := text.Prompts[:min(opt.Prompts, len(text.Prompts))]
	greedy, err := Generate(base, prompts, opt.GenTokens)
	if err != nil {
		return fmt.Errorf("base greedy: %w", err)
	}
	ids := text.Stream[:windows*opt.Ctx]
	tensors := []safetensors.Tensor{i64Tensor("ids", [][]int{ids})}
	bw := &baseWindows{m: base, text: text, opt: opt, n: windows, lp: map[int][]float32{}, order: writeOrder(windows), computed: map[int]bool{}}
	if lm, ok := base.(LayerModel); ok {
		if L, H := lm.LayerShape(); L > 0 {
			bw.layers = true
			tensors = append(tensors, safetensors.Tensor{
				Name: "layers", DType: dtype.F32, Shape: []int64{int64(L), int64(count), int64(H)},
				Produce: func() ([]byte, error) {
					if err := bw.run(0); err != nil {
						return nil, err
					}
					b := make([]byte, 0, L*count*H*4)
					for _, l := range bw.layer0 {
						b = append(b, f32Bytes(l)...)
					}
					bw.layer0 = nil
					return b, nil
				},
			})
		}
	}
	for w := range windows {
		tensors = append(tensors, safetensors.Tensor{
			Name: "logprobs." + strconv.Itoa(w), DType: dtype.F32, Shape: []int64{int64(count), int64(V)},
			Produce: func() ([]byte, error) {
				if err := bw.run(w); err != nil {
					return nil, err
				}
				lp := bw.lp[w]
				delete(bw.lp, w)
				return f32Bytes(lp), nil
			},
		})
	}
	if len(prompts) > 0 {
		tensors = append(tensors, i64Tensor("prompts", prompts), i64Tensor("greedy", greedy))
	}
	if opt.Unchanged != nil {
		out.Guard(opt.Unchanged)
	}
	meta := map[string]string{
		"format": baseFormat, "ctx": strconv.Itoa(opt.Ctx), "vocab": strconv.Itoa(V),
		"base": base.Describe(), "source": text.Source,
	}
	if opt.BaseID != "" {
		meta["base_sha256"] = opt.BaseID
	}
	return safetensors.WriteFile(out, tensors, safetensors.WriteOptions{Metadata: meta})
}

// baseWindows computes the base's log-probs a batch of windows at a time
// (RunBatch: a streamed model loads each layer once per batch), keeping
// them until written. The writer asks for the windows in its own order
// (by tensor name: logprobs.0, .1, .10, .100, ...), so a batch is the
// windows it asks for next: each is written soon after it is computed,
// and at most a batch is held, never the whole text's.
type baseWindows struct {
	m        Model
	text     *Text
	opt      Settings
	n        int
	layers   bool              // window 0 also gives the per-layer residuals
	lp       map[int][]float32 // computed, not yet written
	layer0   [][]float32       // window 0's residuals, until written
	order    []int             // the windows in the writer's order
	next     int               // order[next:] may not be computed yet
	computed map[int]bool
}

const baseBatchBytes = 512 << 20

// writeOrder is the windows in the order the safetensors writer asks for
// their tensors: by name.
func writeOrder(n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return strconv.Itoa(order[a]) < strconv.Itoa(order[b]) })
	return order
}

// run makes sure window w is computed, with the windows asked for after it.
func (bw *baseWindows) run(w int) error {
	if bw.computed[w] {
		return nil
	}
	first, count := Scored(bw.opt.Ctx)
	V := bw.m.Vocab()
	// As many windows as one RunBatch batch runs, at most baseBatchBytes
	// of log-probs.
	k := max(1, min(baseBatchBytes/(4*count*V), maxBatchTokens/bw.opt.Ctx))
	batch := []int{w}
	for ; bw.next < len(bw.order) && len(batch) < k; bw.next++ {
		if x := bw.order[bw.next]; x != w && !bw.computed[x] {
			batch = append(batch, x)
		}
	}
	var reqs []Request
	for _, i := range batch {
		reqs = append(reqs, Request{IDs: bw.text.Window(i, bw.opt.Ctx)[:bw.opt.Ctx-1], First: first, Layers: i == 0 && bw.layers})
	}
	err := RunBatch(bw.m, reqs, func(i int, out Output) error {
		if err := bw.opt.stopped(); err != nil {
			return err
		}
		w := batch[i]
		if len(out.Logits) != count*V {
			return fmt.Errorf("base, window %d: %d logits, want %d", w, len(out.Logits), count*V)
		}
		lp := make([]float32, count*V)
		for r := range count {
			LogSoftmax(lp[r*V:(r+1)*V], out.Logits[r*V:(r+1)*V])
		}
		bw.lp[w] = lp
		bw.computed[w] = true
		if w == 0 && bw.layers {
			bw.layer0 = out.Layers
		}
		if bw.opt.Progress != nil {
			bw.opt.Progress(1)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	return nil
}

// Layers returns the base's residual leaving each layer at window 0's
// scored positions, [count*H] per layer (views of the file), or nil when
// the file has none.
func (b *BaseLogits) Layers() ([][]float32, error) {
	info, raw, err := b.f.Raw("layers")
	if err != nil {
		return nil, nil
	}
	if info.DType != dtype.F32 || len(info.Shape) != 3 {
		return nil, fmt.Errorf("%s: layers is %s%v, want F32 [layers, count, hidden]", b.Path, info.DType, info.Shape)
	}
	all := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(raw))), len(raw)/4)
	n := int(info.Shape[1] * info.Shape[2])
	out := make([][]float32, info.Shape[0])
	for i := range out {
		out[i] = all[i*n : (i+1)*n]
	}
	return out, nil
}

// OpenBase opens a base log-probs file and checks that it was made for
// this text, context and vocabulary.
func OpenBase(path string, text *Text, opt Settings, vocab int) (*BaseLogits, error) {
	f, err := safetensors.OpenFile(path)
	if err != nil {
		return nil, err
	}
	b := &BaseLogits{Path: path, f: f}
	if err := b.load(text, opt, vocab); err != nil {
		f.Close()
		return nil, fmt.Errorf("--base-logits %s: %w", path, err)
	}
	return b, nil
}

func (b *BaseLogits) load(text *Text, opt Settings, vocab int) error {
	md := b.f.Header.Metadata
	if md["format"] != baseFormat {
		return fmt.Errorf("not a sparkconv eval base file (metadata format %q, want %q)", md["format"], baseFormat)
	}
	var err1, err2 error
	b.Ctx, err1 = strconv.Atoi(md["ctx"])
	b.Vocab, err2 = strconv.Atoi(md["vocab"])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("bad ctx %q or vocab %q in the metadata", md["ctx"], md["vocab"])
	}
	b.Base, b.Source = md["base"], md["source"]
	stale := func(what string) error {
		return fmt.Errorf("made for %s; delete it or give another path to recompute the base", what)
	}
	if got := md["base_sha256"]; opt.BaseID != "" && got != opt.BaseID {
		if got == "" {
			got = "not recorded"
		}
		return stale(fmt.Sprintf("another base model (%s, sha256 of its config.json and weights %s; this base's is %s)", b.Base, got, opt.BaseID))
	}
	if b.Ctx != opt.Ctx {
		return stale(fmt.Sprintf("--ctx %d, not %d", b.Ctx, opt.Ctx))
	}
	if b.Vocab != vocab {
		return stale(fmt.Sprintf("a vocabulary of %d, not %d", b.Vocab, vocab))
	}
	ids, err := b.i64("ids", 1)
	if err != nil {
		return err
	}
	b.IDs = ids[0]
	if want := text.Stream[:text.Windows(opt.Ctx)*opt.Ctx]; !slices.Equal(b.IDs, want) {
		return stale(fmt.Sprintf("other text (%s: %d window tokens, this text has %d)", b.Source, len(b.IDs), len(want)))
	}
	if _, ok := b.f.Header.Tensor("prompts"); ok {
		if b.Prompts, err = b.i64("prompts", 2); err != nil {
			return err
		}
		if b.Greedy, err = b.i64("greedy", 2); err != nil {
			return err
		}
	}
	if n := min(opt.Prompts, len(text.Prompts)); len(b.Prompts) != n || (n > 0 && (len(b.Greedy[0]) != opt.GenTokens || !slices.EqualFunc(b.Prompts, text.Prompts[:n], slices.Equal))) {
		return stale(fmt.Sprintf("%d greedy prompts of other tokens or lengths", len(b.Prompts)))
	}
	return nil
}

// i64 reads an I64 tensor of rank 1 or 2 as rows of ints.
func (b *BaseLogits) i64(name string, rank int) ([][]int, error) {
	info, raw, err := b.f.Raw(name)
	if err != nil {
		return nil, err
	}
	if info.DType != dtype.I64 || len(info.Shape) != rank {
		return nil, fmt.Errorf("tensor %s is %s%v, want I64 of rank %d", name, info.DType, info.Shape, rank)
	}
	cols := int(info.Shape[rank-1])
	var out [][]int
	for r := 0; r*cols*8 < len(raw); r++ {
		row := make([]int, cols)
		for c := range row {
			row[c] = int(int64(binary.LittleEndian.Uint64(raw[(r*cols+c)*8:])))
		}
		out = append(out, row)
	}
	if len(out) == 0 {
		out = [][]int{{}}
	}
	return out, nil
}

// i64Tensor stores rows of equal length as I64 [rows, cols] ([cols] for
// one row named ids).
func i64Tensor(name string, rows [][]int) safetensors.Tensor {
	cols := len(rows[0])
	shape := []int64{int64(len(rows)), int64(cols)}
	if name == "ids" {
		shape = shape[1:]
	}
	return safetensors.Tensor{Name: name, DType: dtype.I64, Shape: shape, Produce: func() ([]byte, error) {
		b := make([]byte, 0, 8*len(rows)*cols)
		for _, r := range rows {
			for _, v := range r {
				b = binary.LittleEndian.AppendUint64(b, uint64(int64(v)))
			}
		}
		return b, nil
	}}
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// tempBase is a temporary path for a base file nobody asked to keep: in
// an outdir.Scratch folder, which an interrupt removes, and a later eval
// too when this one is killed.
func tempBase() (string, func(), error) {
	s, err := outdir.NewScratch("sparkconv-eval-")
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(s.Path(), "base.safetensors"), s.Remove, nil
}
