package calib

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"runtime/debug"

	"sparkconv/forward"
	"sparkconv/kernels"
	"sparkconv/progress"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// File names in the output folder.
const (
	SummaryFile    = "summary.json"
	HeadFile       = "head.safetensors"
	SummaryFormat  = "sparkconv-calibration" // summary.json's "format", the files' metadata
	SummaryVersion = 1
)

// LayerFile is the statistics file of layer i: layer_00.safetensors, ...
func LayerFile(i int) string { return fmt.Sprintf("layer_%02d.safetensors", i) }

// Summary is summary.json.
type Summary struct {
	Format     string        `json:"format"`
	Version    int           `json:"version"`
	Model      ModelInfo     `json:"model"`
	SeqLen     int           `json:"seq_len"`
	MaxSamples int           `json:"max_samples"`
	Seed       uint64        `json:"seed"`
	Kernels    string        `json:"kernels"` // the kernel family that ran the forward (kernels.Family)
	Samples    []SampleInfo  `json:"samples"`
	Chunks     int           `json:"chunks"`
	Tokens     int64         `json:"tokens"`
	Inputs     []InputInfo   `json:"inputs"`
	Layers     []LayerRanges `json:"layers"`
	// Head holds the ranges of final_norm (the head's input) and logits.
	Head map[string]Range `json:"head"`
}

// ModelInfo is the part of config.json the statistics depend on.
type ModelInfo struct {
	ModelType     string   `json:"model_type"`
	Layers        int      `json:"num_hidden_layers"`
	Hidden        int      `json:"hidden_size"`
	Intermediate  int      `json:"intermediate_size"`
	Heads         int      `json:"num_attention_heads"`
	KVHeads       int      `json:"num_key_value_heads"`
	HeadDim       int      `json:"head_dim"`
	Vocab         int      `json:"vocab_size"`
	SlidingWindow int      `json:"sliding_window"`
	LayerTypes    []string `json:"layer_types"`
	Tied          bool     `json:"tie_word_embeddings"`
}

// SampleInfo is one calibration sample used.
type SampleInfo struct {
	Text
	Tokens int `json:"tokens"`
	Chunks int `json:"chunks"`
}

// InputInfo describes the statistics of one linear input.
type InputInfo struct {
	Name     string   `json:"name"` // tensor name prefix
	File     string   `json:"file"`
	Layer    int      `json:"layer"` // -1 for the head
	Point    string   `json:"point"` // forward.Point name of the activation
	Modules  []string `json:"modules"`
	Channels int      `json:"channels"`
	Tokens   int64    `json:"tokens"`
	AbsMax   float32  `json:"absmax"`
}

// LayerRanges holds one layer's ranges by forward.Point name.
type LayerRanges struct {
	Layer  int              `json:"layer"`
	Type   string           `json:"type"`
	File   string           `json:"file"`
	Ranges map[string]Range `json:"ranges"`
}

// RecordOptions control Record.
type RecordOptions struct {
	Ctx        context.Context // cancels between chunks; nil = never
	Bar        *progress.Bar   // advanced once per chunk and layer; nil = none
	SeqLen     int             // recorded in the summary
	MaxSamples int             // recorded in the summary
	Seed       uint64          // recorded in the summary
}

// Record calibrates m on the chunks and writes the
// statistics files and summary.json into dir, which must exist. It runs
// the corpus layer by layer: every chunk's residual stream is kept
// ([tokens, H] float32 in all), and only one layer's float64 accumulators
// are in memory at a time. Each layer is used once, so m is best opened
// with forward.Options{CachedLayers: 1}.
func Record(m *forward.Model, texts []Text, chunks []Chunk, dir string, opt RecordOptions) (*Summary, error) {
	if len(chunks) == 0 {
		return nil, fmt.Errorf("calibrate: no tokens")
	}
	if opt.Ctx == nil {
		opt.Ctx = context.Background()
	}
	c := m.Cfg
	s := newSummary(c, texts, chunks, opt)
	loop := &Loop{Model: m, Chunks: chunks, Ctx: opt.Ctx, Bar: opt.Bar, Label: func(k int) string {
		return fmt.Sprintf("%s chunk at token %d", texts[chunks[k].Sample].where(), chunks[k].Start)
	}}
	if err := loop.Embed(); err != nil {
		return nil, err
	}
	lr := &layerRun{loop: loop, dir: dir, accs: map[forward.Point]*inputAcc{
		forward.AttnNorm: newInputAcc(c.HiddenSize), forward.AttnGated: newInputAcc(c.QDim()),
		forward.MLPNorm: newInputAcc(c.HiddenSize), forward.MLPAct: newInputAcc(c.IntermediateSize),
	}}
	for i := range c.NumLayers {
		if err := lr.layer(i, s); err != nil {
			return nil, err
		}
		// The layer's garbage (observer copies, the writer's buffers) goes
		// back to the OS now rather than letting the heap grow to twice
		// the live set before the next collection.
		debug.FreeOSMemory()
	}
	if err := lr.head(s); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := safetensors.WriteFileSync(filepath.Join(dir, SummaryFile), append(data, '\n')); err != nil {
		return nil, err
	}
	return s, nil
}

// layerRun is the state of the layer-by-layer pass.
type layerRun struct {
	loop *Loop
	dir  string
	accs map[forward.Point]*inputAcc // reused from layer to layer
	hbuf []byte                      // Hessian bytes being written, reused
}

// layer runs layer i over every chunk, writes its file and adds it to s.
func (lr *layerRun) layer(i int, s *Summary) error {
	c := lr.loop.Model.Cfg
	lr.loop.Bar.Describe(fmt.Sprintf("calibrate layer %d/%d", i+1, c.NumLayers))
	obs := newObserver(i)
	for _, in := range forward.LinearInputs {
		a := lr.accs[in.Point]
		a.reset(spark.LayerModule(i, in.Readers[0]) + ".input")
		obs.inputs[in.Point] = a
	}
	if err := lr.loop.Layer(i, obs, nil); err != nil {
		return err
	}
	ranges, err := obs.rangeMap(fmt.Sprintf("layer %d", i))
	if err != nil {
		return err
	}
	var ts []safetensors.Tensor
	for _, in := range forward.LinearInputs {
		a := lr.accs[in.Point]
		ts = append(ts, a.tensors(&lr.hbuf)...)
		var readers []string
		for _, r := range in.Readers {
			readers = append(readers, spark.LayerModule(i, r))
		}
		s.Inputs = append(s.Inputs, a.info(LayerFile(i), i, in.Point, readers))
	}
	if err := writeTensors(lr.dir, LayerFile(i), ts); err != nil {
		return err
	}
	s.Layers = append(s.Layers, LayerRanges{Layer: i, Type: string(c.LayerTypes[i]), File: LayerFile(i), Ranges: ranges})
	return nil
}

// head records the final norm (the head's input, with its Hessian) and
// the logits' range.
func (lr *layerRun) head(s *Summary) error {
	m := lr.loop.Model
	H := m.Cfg.HiddenSize
	lr.loop.Bar.Describe("calibrate head")
	obs := newObserver(forward.ModelLevel)
	a := newInputAcc(H)
	a.reset(HeadModule + ".input")
	obs.inputs[forward.FinalNorm] = a
	err := lr.loop.Pass(func(k, T int) error {
		fn := m.FinalNorm(lr.loop.Streams[k])
		obs.Observe(forward.ModelLevel, forward.FinalNorm, fn, H)
		lr.loop.Streams[k] = nil
		return m.HeadBlocks(fn, T, func(v0, v1 int, blk []float32) {
			obs.Observe(forward.ModelLevel, forward.Logits, blk, v1-v0)
		})
	})
	if err != nil {
		return err
	}
	ranges, err := obs.rangeMap("head")
	if err != nil {
		return err
	}
	s.Head = ranges
	// "lm_head" also when tied (model.tie_word_embeddings says which)
	s.Inputs = append(s.Inputs, a.info(HeadFile, -1, forward.FinalNorm, []string{HeadModule}))
	return writeTensors(lr.dir, HeadFile, a.tensors(&lr.hbuf))
}

func newSummary(c *spark.Config, texts []Text, chunks []Chunk, opt RecordOptions) *Summary {
	s := &Summary{Format: SummaryFormat, Version: SummaryVersion, SeqLen: opt.SeqLen, MaxSamples: opt.MaxSamples, Seed: opt.Seed, Kernels: kernels.Family(), Chunks: len(chunks)}
	s.Model = ModelInfo{ModelType: c.ModelType, Layers: c.NumLayers, Hidden: c.HiddenSize, Intermediate: c.IntermediateSize,
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim, Vocab: c.VocabSize, SlidingWindow: c.SlidingWindow, Tied: c.TieWordEmbeddings}
	for _, t := range c.LayerTypes {
		s.Model.LayerTypes = append(s.Model.LayerTypes, string(t))
	}
	s.Samples = make([]SampleInfo, len(texts))
	for k, t := range texts {
		s.Samples[k].Text = t
	}
	for _, ch := range chunks {
		s.Samples[ch.Sample].Tokens += len(ch.IDs)
		s.Samples[ch.Sample].Chunks++
		s.Tokens += int64(len(ch.IDs))
	}
	return s
}

// writeTensors writes one safetensors file dir/name.
func writeTensors(dir, name string, ts []safetensors.Tensor) error {
	opt := safetensors.WriteOptions{Metadata: map[string]string{"format": SummaryFormat}}
	if err := safetensors.WriteNew(filepath.Join(dir, name), ts, opt); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// WriteText prints the human summary: the real ranges per layer.
func (s *Summary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "calibrated on %d samples: %d chunks, %d tokens (seq-len %d)\n", len(s.Samples), s.Chunks, s.Tokens, s.SeqLen)
	fmt.Fprintf(w, "%5s  %-7s  %12s  %10s  %10s  %21s  %10s\n", "layer", "type", "input absmax", "K absmax", "V absmax", "scores [min, max]", "mlp_act")
	for _, l := range s.Layers {
		r := l.Ranges
		typ := "sliding"
		if l.Type == string(spark.Full) {
			typ = "full"
		}
		fmt.Fprintf(w, "%5d  %-7s  %12.4g  %10.4g  %10.4g  [%9.4g, %9.4g]  %10.4g\n", l.Layer, typ,
			r["hidden_in"].AbsMax, r["k_rope"].AbsMax, r["v"].AbsMax, r["scores"].Min, r["scores"].Max, r["mlp_act"].AbsMax)
	}
	fmt.Fprintf(w, "head: input absmax %.4g, logits [%.4g, %.4g]\n", s.Head["final_norm"].AbsMax, s.Head["logits"].Min, s.Head["logits"].Max)
	widest := 0
	for _, in := range s.Inputs {
		widest = max(widest, in.Channels)
	}
	if s.Tokens < int64(widest) {
		fmt.Fprintf(w, "note: %d tokens < %d channels of the widest linear input: its Hessian is rank-deficient (GPTQ's damping copes; more samples help)\n", s.Tokens, widest)
	}
}
