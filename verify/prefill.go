package verify

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/ortrun"
)

// PrefillDecode is how many decode steps follow each prompt of the
// prefill check: the decode graphs then run on caches the prefill left.
const PrefillDecode = 4

// DefaultPrompts are the prompt lengths the prefill check drives through
// prefill graphs of n tokens: one token (a chunk of padding but one row),
// n-1 and n+1 (a chunk ending one short of full, one spilling a token
// into a second chunk), and 2n+300 (ending mid-chunk, past a 512-token
// sliding window for n = 128), each at most context - PrefillDecode.
func DefaultPrompts(n, context int) []int {
	var out []int
	seen := map[int]bool{}
	for _, l := range []int{1, n - 1, n + 1, 2*n + 300} {
		l = min(l, context-PrefillDecode)
		if l >= 1 && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	sort.Ints(out)
	return out
}

// PrefillReport is the prefill check: per prompt, what every graph gave
// on the way (prefill graphs over the prompt's chunks, then the decode
// graphs for PrefillDecode steps) against the reference at every
// position.
type PrefillReport struct {
	Tokens  int            `json:"tokens"`
	Decode  int            `json:"decode_steps"`
	Prompts []PromptReport `json:"prompts"`
}

// PromptReport is one prompt's result. SNR is the lowest over every graph
// output at every position (teacher-forced, gated); Top1 counts the
// positions L-1..L+Decode-1 where the head's top-1 on the reference
// residual agrees (gated); Chain is the head's logits at those positions
// when ONNX Runtime runs on its own outputs from the first token, with its
// top-1 agreement ChainTop1 (reported).
type PromptReport struct {
	Tokens    int     `json:"tokens"`
	Chunks    int     `json:"chunks"`
	SNR       DB      `json:"snr_db"`
	Worst     string  `json:"worst"`
	Top1      int     `json:"top1_agree"`
	Positions int     `json:"positions"`
	Chain     Metric  `json:"chain_logits"`
	ChainTop1 int     `json:"chain_top1_agree"`
	Pass      bool    `json:"pass"`
	worst     float64 // SNR as a float for sorting
}

// prompt is one prompt's state while the graphs run one by one.
type prompt struct {
	length int
	chunks []onnxgraph.Chunk
	// chainH is ORT's own residual entering the next graph: the chunks'
	// rows (padding included, as a runtime feeds them on), then one row
	// per decode step.
	chainH  [][]float32
	accs    map[string]*acc // "file output" -> errors
	chainL  acc
	top1    int
	chTop1  int
	logitsN int
}

// prefillRun is the prefill check of one export.
type prefillRun struct {
	v       *verifier
	n       int
	ids     []int
	res     *forward.Result
	prompts []*prompt
	rng     *rand.Rand
	pre     map[string]onnxgraph.GraphEntry
}

// runPrefill drives each prompt of lengths through the export's prefill
// graphs and then decodes, graph by graph, against one reference prefill
// over the longest prompt's tokens.
func (v *verifier) runPrefill(lengths []int, seed uint64) error {
	man := v.man
	n := man.Prefill.Tokens
	longest := 0
	for _, l := range lengths {
		if l < 1 || l+PrefillDecode > man.Context {
			return fmt.Errorf("prompt of %d tokens: want 1..%d (the context of %d less %d decode steps)", l, man.Context-PrefillDecode, man.Context, PrefillDecode)
		}
		longest = max(longest, l)
	}
	rng := rand.New(rand.NewPCG(seed, 0x9fe1))
	r := &prefillRun{v: v, n: n, ids: make([]int, longest+PrefillDecode), rng: rng, pre: onnxgraph.PrefillOf(man)}
	for p := range r.ids {
		r.ids[p] = rng.IntN(v.ref.Cfg.VocabSize)
	}
	var err error
	if r.res, err = v.ref.Prefill(r.ids, forward.PrefillOptions{Dump: true, Logits: forward.NoLogits}); err != nil {
		return err
	}
	for _, l := range lengths {
		r.prompts = append(r.prompts, &prompt{length: l, chunks: onnxgraph.Chunks(l, n), accs: map[string]*acc{}})
	}
	for _, g := range onnxgraph.GraphOrder(man) {
		if err := r.graph(g); err != nil {
			return fmt.Errorf("prefill check: %s: %w", g.File, err)
		}
	}
	r.report()
	return nil
}

// graph runs every prompt through decode graph g and its prefill graph.
func (r *prefillRun) graph(g onnxgraph.GraphEntry) error {
	dec, err := ortrun.OpenSession(filepath.Join(r.v.dirOf[g.File], g.File), r.v.sopt)
	if err != nil {
		return err
	}
	defer dec.Close()
	var pre *ortrun.Session
	pg, ok := r.pre[g.Name]
	if g.Kind != onnxgraph.KindHead {
		if !ok {
			return fmt.Errorf("no prefill graph")
		}
		if pre, err = ortrun.OpenSession(filepath.Join(r.v.dirOf[pg.File], pg.File), r.v.sopt); err != nil {
			return err
		}
		defer pre.Close()
		r.v.prefillIO = append(r.v.prefillIO, ortrun.CompareIO(pg.File+" inputs", pg.Inputs, pre.Inputs)...)
		r.v.prefillIO = append(r.v.prefillIO, ortrun.CompareIO(pg.File+" outputs", pg.Outputs, pre.Outputs)...)
	}
	for _, pr := range r.prompts {
		if err := r.v.ctx.Err(); err != nil {
			return err
		}
		switch g.Kind {
		case onnxgraph.KindEmbed:
			err = r.embed(pr, g, pg, dec, pre)
		case onnxgraph.KindHead:
			err = r.head(pr, g, dec)
		default:
			err = r.layers(pr, g, pg, dec, pre)
		}
		if err != nil {
			return fmt.Errorf("prompt of %d tokens: %w", pr.length, err)
		}
	}
	return nil
}

// add records ref against got for output name of file, for the prompt and
// (aggregated over prompts) for the graph.
func (r *prefillRun) add(pr *prompt, file, name string, ref, got []float32) {
	a := pr.accs[file+" "+name]
	if a == nil {
		a = &acc{}
		pr.accs[file+" "+name] = a
	}
	a.add(ref, got)
	r.v.acc(file, name).add(ref, got)
}

func (r *prefillRun) h() int { return r.v.ref.Cfg.HiddenSize }

// row returns position p of a [T, w] reference tensor.
func row(x []float32, p, w int) []float32 { return x[p*w : (p+1)*w] }

// refHidden is the reference residual entering layer i (i = layers: the
// last layer's output) at position p.
func (r *prefillRun) refHidden(i, p int) []float32 {
	if i == len(r.res.HiddenIn) {
		return row(r.res.HiddenOut, p, r.h())
	}
	return row(r.res.HiddenIn[i], p, r.h())
}

func (r *prefillRun) embed(pr *prompt, g, pg onnxgraph.GraphEntry, dec, pre *ortrun.Session) error {
	H := r.h()
	pr.chainH = nil
	for _, ch := range pr.chunks {
		out, err := pre.Run(map[string]onnxgraph.Tensor{"input_ids": onnxgraph.PrefillIDs(r.ids, ch, r.n)})
		if err != nil {
			return err
		}
		got := out["hidden_out"].Floats()
		r.add(pr, pg.File, "hidden_out", r.res.HiddenIn[0][ch.Start*H:(ch.Start+ch.Valid)*H], got[:ch.Valid*H])
		for t := range r.n {
			pr.chainH = append(pr.chainH, row(got, t, H))
		}
	}
	for q := pr.length; q < pr.length+PrefillDecode; q++ {
		out, err := dec.Run(map[string]onnxgraph.Tensor{"input_ids": onnxgraph.I64Tensor([]int64{1, 1}, []int64{int64(r.ids[q])})})
		if err != nil {
			return err
		}
		got := out["hidden_out"].Floats()
		r.add(pr, g.File, "hidden_out", r.refHidden(0, q), got)
		pr.chainH = append(pr.chainH, got)
	}
	return nil
}

// layers runs a layer or block graph over the prompt: the prefill graph
// chunk by chunk, then PrefillDecode decode steps, each on the reference's
// inputs (the caches filled by the host loop with the reference's
// entries, never-written slots holding garbage) and, beside it, on ORT's
// own chain.
func (r *prefillRun) layers(pr *prompt, g, pg onnxgraph.GraphEntry, dec, pre *ortrun.Session) error {
	infos := g.LayerInfos()
	lr := &layerRun{r: r, pr: pr, g: g, pg: pg, dec: dec, pre: pre, infos: infos, first: infos[0].Layer, last: infos[len(infos)-1].Layer}
	crng := rand.New(rand.NewPCG(uint64(pr.length), 0x5eed))
	for _, li := range infos {
		st, err := onnxgraph.NewCacheState(&g, li, crng, 50, 1000)
		if err != nil {
			return err
		}
		lr.teach, lr.chain = append(lr.teach, st), append(lr.chain, st.Clone())
	}
	for c, ch := range pr.chunks {
		if err := lr.chunk(c, ch); err != nil {
			return fmt.Errorf("chunk at %d: %w", ch.Start, err)
		}
	}
	for q := pr.length; q < pr.length+PrefillDecode; q++ {
		if err := lr.decode(q); err != nil {
			return fmt.Errorf("decode at %d: %w", q, err)
		}
	}
	pr.chainH = lr.chainH
	return nil
}

// layerRun is one prompt's run through one layer or block graph.
type layerRun struct {
	r            *prefillRun
	pr           *prompt
	g, pg        onnxgraph.GraphEntry
	dec, pre     *ortrun.Session
	infos        []onnxgraph.LayerInfo
	first, last  int
	teach, chain []*onnxgraph.CacheState
	chainH       [][]float32 // ORT's own output rows, for the next graph
}

// feeds are the graph's inputs for n tokens at p (n = 1: the decode step).
func (lr *layerRun) feeds(states []*onnxgraph.CacheState, hidden []float32, p, n int) map[string]onnxgraph.Tensor {
	v := lr.r.v
	mv := float32(v.man.MaskValue)
	f := map[string]onnxgraph.Tensor{"hidden_in": onnxgraph.FloatTensor(v.dt, []int64{1, int64(n), int64(lr.r.h())}, hidden)}
	for k, li := range lr.infos {
		sfx := onnxgraph.LayerSuffix(lr.g.Kind, li.Layer)
		fs := states[k].Feeds(v.dt, p, mv, sfx)
		if n > 1 {
			fs = states[k].PrefillFeeds(v.dt, p, n, mv, sfx)
		}
		for name, t := range fs {
			f[name] = t
		}
	}
	return f
}

// refEntries are layer's reference keys and values of positions p..p+v-1.
func (lr *layerRun) refEntries(layer, p, v int) (key, value []float32) {
	kvd := lr.r.v.ref.Cfg.KVDim()
	return lr.r.res.Key[layer][p*kvd : (p+v)*kvd], lr.r.res.Value[layer][p*kvd : (p+v)*kvd]
}

// chunk runs the prefill graph on chunk c: teacher-forced (the reference
// rows, padding rows of garbage) against the reference, then on ORT's
// chain (its own rows, padding rows as the previous graph left them).
func (lr *layerRun) chunk(c int, ch onnxgraph.Chunk) error {
	r, H, n := lr.r, lr.r.h(), lr.r.n
	hidden := make([]float32, n*H)
	copy(hidden, r.res.HiddenIn[lr.first][ch.Start*H:(ch.Start+ch.Valid)*H])
	for i := ch.Valid * H; i < len(hidden); i++ {
		hidden[i] = float32(r.rng.NormFloat64() * 10)
	}
	out, err := lr.pre.Run(lr.feeds(lr.teach, hidden, ch.Start, n))
	if err != nil {
		return err
	}
	ref := make([]float32, 0, ch.Valid*H)
	for t := range ch.Valid {
		ref = append(ref, r.refHidden(lr.last+1, ch.Start+t)...)
	}
	r.add(lr.pr, lr.pg.File, "hidden_out", ref, out["hidden_out"].Floats()[:ch.Valid*H])
	for k, li := range lr.infos {
		sfx := onnxgraph.LayerSuffix(lr.g.Kind, li.Layer)
		key, val, err := onnxgraph.PrefillEntries(out, lr.teach[k].KV, lr.teach[k].D, n, ch.Valid, sfx)
		if err != nil {
			return err
		}
		rk, rv := lr.refEntries(li.Layer, ch.Start, ch.Valid)
		r.add(lr.pr, lr.pg.File, "key"+sfx, rk, key)
		r.add(lr.pr, lr.pg.File, "value"+sfx, rv, val)
		lr.teach[k].Put(ch.Start, rk, rv)
	}
	in := make([]float32, 0, n*H)
	for t := range n {
		in = append(in, lr.pr.chainH[c*n+t]...)
	}
	if out, err = lr.pre.Run(lr.feeds(lr.chain, in, ch.Start, n)); err != nil {
		return err
	}
	for k, li := range lr.infos {
		if _, _, err := lr.chain[k].UpdatePrefill(out, ch.Start, n, ch.Valid, onnxgraph.LayerSuffix(lr.g.Kind, li.Layer)); err != nil {
			return err
		}
	}
	for t := range n {
		lr.chainH = append(lr.chainH, row(out["hidden_out"].Floats(), t, H))
	}
	return nil
}

// decode runs the decode step at q on the caches the prompt left:
// teacher-forced against the reference, then on ORT's chain.
func (lr *layerRun) decode(q int) error {
	r, pr := lr.r, lr.pr
	out, err := lr.dec.Run(lr.feeds(lr.teach, r.refHidden(lr.first, q), q, 1))
	if err != nil {
		return err
	}
	r.add(pr, lr.g.File, "hidden_out", r.refHidden(lr.last+1, q), out["hidden_out"].Floats())
	for k, li := range lr.infos {
		sfx := onnxgraph.LayerSuffix(lr.g.Kind, li.Layer)
		key, val, err := lr.teach[k].Clone().Update(out, q, sfx) // the graph's entry, read as the runtime stores it
		if err != nil {
			return err
		}
		rk, rv := lr.refEntries(li.Layer, q, 1)
		r.add(pr, lr.g.File, "key"+sfx, rk, key)
		r.add(pr, lr.g.File, "value"+sfx, rv, val)
		lr.teach[k].Put(q, rk, rv)
	}
	if out, err = lr.dec.Run(lr.feeds(lr.chain, pr.chainH[len(pr.chunks)*r.n+q-pr.length], q, 1)); err != nil {
		return err
	}
	for k, li := range lr.infos {
		if _, _, err := lr.chain[k].Update(out, q, onnxgraph.LayerSuffix(lr.g.Kind, li.Layer)); err != nil {
			return err
		}
	}
	lr.chainH = append(lr.chainH, out["hidden_out"].Floats())
	return nil
}

// head scores the logits of positions L-1 (the first token after the
// prompt) to L+PrefillDecode-1: on the reference residual (gated) and on
// ORT's chain (reported).
func (r *prefillRun) head(pr *prompt, g onnxgraph.GraphEntry, dec *ortrun.Session) error {
	m, H := r.v.ref, r.h()
	last := pr.chunks[len(pr.chunks)-1]
	for q := pr.length - 1; q < pr.length+PrefillDecode; q++ {
		logits, err := m.Logits(row(r.res.FinalNorm, q, H), 1)
		if err != nil {
			return err
		}
		out, err := dec.Run(map[string]onnxgraph.Tensor{"hidden_in": r.v.hiddenTensor(r.refHidden(len(r.res.HiddenIn), q))})
		if err != nil {
			return err
		}
		got := out["logits"].Floats()
		r.add(pr, g.File, "logits", logits, got)
		if topK(logits, 1)[0] == topK(got, 1)[0] {
			pr.top1++
		}
		// ORT's chain: the prompt's last row sits in the last chunk.
		ci := len(pr.chunks)*r.n + q - pr.length
		if q == pr.length-1 {
			ci = (len(pr.chunks)-1)*r.n + q - last.Start
		}
		out, err = dec.Run(map[string]onnxgraph.Tensor{"hidden_in": r.v.hiddenTensor(pr.chainH[ci])})
		if err != nil {
			return err
		}
		got = out["logits"].Floats()
		pr.chainL.add(logits, got)
		if topK(logits, 1)[0] == topK(got, 1)[0] {
			pr.chTop1++
		}
		pr.logitsN++
	}
	return nil
}

// report applies the bars to each prompt and records the check.
func (r *prefillRun) report() {
	rep := &PrefillReport{Tokens: r.n, Decode: PrefillDecode}
	for _, pr := range r.prompts {
		p := PromptReport{Tokens: pr.length, Chunks: len(pr.chunks), SNR: DB(math.Inf(1)), Positions: pr.logitsN,
			Top1: pr.top1, Chain: pr.chainL.metric(), ChainTop1: pr.chTop1, Pass: true, worst: math.Inf(1)}
		names := make([]string, 0, len(pr.accs))
		for k := range pr.accs {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			snr := pr.accs[k].metric().SNR
			if float64(snr) < p.worst || math.IsNaN(float64(snr)) {
				p.worst, p.Worst = float64(snr), k
			}
			if float64(snr) < r.v.report.BarDB || math.IsNaN(float64(snr)) {
				p.Pass = false
				r.v.fail("prompt of %d tokens: %s: SNR %.1f dB < %.0f dB", pr.length, k, float64(snr), r.v.report.BarDB)
			}
		}
		p.SNR = DB(p.worst)
		if pr.top1 != pr.logitsN {
			p.Pass = false
			r.v.fail("prompt of %d tokens: head top-1 agrees at %d of %d positions", pr.length, pr.top1, pr.logitsN)
		}
		rep.Prompts = append(rep.Prompts, p)
	}
	r.v.report.Prefill = rep
}

// ParsePrompts reads a --prompts value: prompt lengths such as "1,127,129,556".
func ParsePrompts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a prompt length (a positive integer)", f)
		}
		out = append(out, n)
	}
	return out, nil
}
