package qnnbundle

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sparkconv/infile"
	"sparkconv/onnxeval"
	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"
	"sparkconv/qnn"
)

// The bundle's layout (what AI Hub's upload_model of a .aimet folder and
// submit_quantize_job take, docs/qnn.md#the-bundle):
//
//	<out>/<graph>.aimet/<graph>.onnx        the float graph, byte for byte the export's
//	<out>/<graph>.aimet/<graph>.encodings   AIMET 1.0.0 encodings
//	<out>/calib/<graph>.npz                 calibration inputs, stacked per input name
//	<out>/qdq/                              an export folder of the QDQ simulation graphs (manifest.json, same file names)
//	<out>/bundle.json                       what was calibrated and the simulated SNR per graph
const (
	BundleFile = "bundle.json"
	CalibDir   = "calib"
	QDQDir     = "qdq"
)

// GraphResult is what the bundle wrote for one graph.
type GraphResult struct {
	Name        string   `json:"-"`
	Dir         string   `json:"dir"`
	Files       []string `json:"files"`
	CalibFile   string   `json:"calib_file"`
	Samples     int      `json:"calib_samples"`
	Observed    int      `json:"observed_positions"`
	Activations int      `json:"activation_encodings"`
	Params      int      `json:"param_encodings"`
	Patterns    int      `json:"fused_patterns"`
	Bytes       int64    `json:"bytes"`
	Kind        string   `json:"-"` // the export's graph kind
	// Filled by the simulation (SimResult; nil for an SNR that is +Inf,
	// an exact reproduction). SNR and SNRDelta are pooled over every
	// position of every held-out sequence.
	SNR      *float64 `json:"snr_db"`
	SNRDelta *float64 `json:"snr_delta_db,omitempty"`
	// SNRSequences is the SNR of each held-out sequence
	// (Calibration.HeldOutSequences, in order) over its own positions;
	// SNRWorstSeq the lowest of them, of sequence WorstSeq (an index into
	// that list): what the bar applies to.
	SNRSequences []*float64 `json:"snr_sequences_db"`
	SNRWorstSeq  *float64   `json:"snr_worst_sequence_db,omitempty"`
	WorstSeq     int        `json:"worst_sequence_sample"`
	// SNRWorst is the lowest SNR of a single held-out position, at
	// WorstPos of sequence WorstPosSeq.
	SNRWorst    *float64 `json:"snr_worst_db,omitempty"`
	WorstPos    int      `json:"worst_position"`
	WorstPosSeq int      `json:"worst_position_sample"`
	Top1        *float64 `json:"top1_agree,omitempty"`
	// Held counts the graph runs scored over every held-out sequence
	// (positions; chunks for a prefill graph).
	Held int `json:"held_out_runs"`
	// Tied counts the activation encodings taken from the decode graph
	// (prefill graphs only).
	Tied int `json:"tied_encodings,omitempty"`
	// RangePolicies says how each activation's range was chosen: the
	// graph's activations grouped by policy, with the reason.
	RangePolicies []RangePolicies `json:"range_policies"`
	// Search is the weight search's record (precisions with Search).
	Search *WeightSearch `json:"weight_search,omitempty"`
	// Overflows are the activation tensors whose held-out values went
	// farthest past their encoded ranges (the float graph run on the
	// held-out samples), at most MaxOverflows of them; OverflowTensors
	// counts every tensor that went past its range.
	Overflows       []Overflow `json:"held_out_overflows"`
	OverflowTensors int        `json:"held_out_overflow_tensors"`
	// WeightBits, when not 0, are the graph's MatMul weight bits in place
	// of the bundle's: a graph promoted out of the 4-bit recipe
	// (Precision.Promoted), or the prefill graph of one.
	WeightBits int `json:"weight_bits,omitempty"`
	// Promoted is what the graph simulated at the bundle's own precision
	// before it was rebuilt at WeightBits.
	Promoted *Promotion `json:"promoted_from,omitempty"`
}

// Promotion is a promoted graph's figures at the precision it was
// promoted from (Options.PromoteBelow).
type Promotion struct {
	FromBits    int      `json:"weight_bits"`
	SNR         *float64 `json:"snr_db"`
	SNRWorstSeq *float64 `json:"snr_worst_sequence_db"`
	WorstSeq    int      `json:"worst_sequence_sample"`
}

// remove deletes what res wrote for graph e under out (its .aimet folder,
// npz and QDQ graph), for the graph to be built again.
func (res *GraphResult) remove(out string, e onnxgraph.GraphEntry) error {
	qdq := filepath.Join(out, QDQDir, e.File)
	for _, p := range []string{filepath.Join(out, res.Dir), filepath.Join(out, res.CalibFile), qdq, qdq + ".data"} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// Positions are the stream positions a bundle uses: Observe set the
// activation ranges and Calib go into the npz (a subset of Observe), both
// positions of the calibration trace; Held are positions of the held-out
// trace (text the ranges never saw), where the simulation is scored.
type Positions struct {
	Observe, Calib, Held []int
}

// RangeOptions say how observed ranges become activation encodings.
type RangeOptions struct {
	// MaskClip is the low end of the attention mask's encoding (MaskClip);
	// calibration feeds the mask clamped to it, as the input quantizer
	// delivers it.
	MaskClip float64
	// Headroom widens every observed range of a 16-bit activation by this
	// factor about 0 (1: the observed min/max); see qnn.EncodingPlan.Encodings.
	Headroom float64
	// Wider gives the tensors it names (by name or last name part) a
	// headroom of their own (qnn.EncodingPlan.Wider).
	Wider map[string]float64
	// Tie, for a prefill graph, holds the decode graph's encodings of the
	// tensors the two share (PrefillTies): they and every tensor tied to
	// them take those encodings as they are.
	Tie map[string]qnn.Encoding
	// Held, when set, are the held-out samples the float graph runs on
	// against the encodings chosen (Overflows: the tensors they drive past
	// their ranges).
	Held Samples
	// More, when set, are samples of further calibration sequences
	// (Options.CalibSequences) whose activations widen the observed
	// ranges too.
	More Samples
	// Params, for a prefill graph of a precision with Search, holds the
	// decode graph's parameter encodings, which its weights take as they
	// are (no search of its own).
	Params map[string]qnn.Encoding
	// Weights, for a prefill graph of a precision with Solve, holds the
	// decode graph's solved weights, which its graph takes as they are.
	Weights map[string][]float32
}

// RangePolicies are the activations whose range one policy chose
// (qnn.RangePolicy), and why.
type RangePolicies struct {
	Policy  qnn.RangePolicy `json:"policy"`
	Why     string          `json:"why"`
	Tensors []string        `json:"tensors"`
}

// policies groups enc's activations by policy, in policy order, each
// group's tensors in the file's order.
func policies(enc *qnn.Encodings) []RangePolicies {
	at := map[qnn.RangePolicy]int{}
	var out []RangePolicies
	for _, a := range enc.Activations {
		p := enc.Policy[a.Name]
		k, ok := at[p]
		if !ok {
			k, at[p] = len(out), len(out)
			out = append(out, RangePolicies{Policy: p, Why: p.Why()})
		}
		out[k].Tensors = append(out[k].Tensors, a.Name)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Policy < out[j].Policy })
	return out
}

// BundleGraph calibrates one graph of the export in dir on the trace and
// writes its .aimet folder, its calibration npz and its QDQ simulation
// graph under out. It returns what it wrote and the QDQ graph's manifest
// entry.
func BundleGraph(dir, out string, t *Trace, e onnxgraph.GraphEntry, pos Positions, prec qnn.Precision, opt RangeOptions) (*GraphResult, *onnxgraph.GraphEntry, error) {
	src := filepath.Join(dir, e.File)
	m, err := onnxio.ReadModelWithData(src)
	if err != nil {
		return nil, nil, err
	}
	plan := qnn.NewEncodingPlan(m)
	plan.Wider = opt.Wider
	g, err := onnxeval.Load(m)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", e.File, err)
	}
	mask := maskRanges(e, opt.MaskClip)
	fixed := maps.Clone(mask)
	tieRanges(fixed, opt.Tie)
	ranges := qnn.Ranges{}
	var taps []func(string, onnxeval.Value)
	search := newWeightSearch(m, plan, prec, g)
	if search != nil && opt.Params == nil {
		taps = append(taps, search.tap)
	}
	if err := t.Samples(e, pos.Observe, false, func(s Sample) error { return observe(g, plan, s, fixed, ranges, taps...) }); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", e.File, err)
	}
	if opt.More != nil {
		if err := opt.More(func(s Sample) error { return observe(g, plan, s, fixed, ranges, taps...) }); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", e.File, err)
		}
	}
	absmax := map[string][]float64{}
	for _, p := range plan.Params {
		v, _ := g.Initializer(p.Name)
		dims := make([]int64, len(v.Shape))
		for i, d := range v.Shape {
			dims[i] = int64(d)
		}
		absmax[p.Name] = qnn.ParamAbsMax(v.F, dims, p.Axis)
	}
	var searched *WeightSearch
	if opt.Params == nil {
		if searched, err = search.apply(g, prec, absmax); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", e.File, err)
		}
	}
	enc, err := plan.Encodings(prec, ranges, fixed, absmax, opt.Headroom)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", e.File, err)
	}
	search.setBlocks(enc)
	tied := applyTies(enc, plan, opt.Tie)
	tieParams(enc, opt.Params)
	var over []Overflow
	var overN int
	if opt.Held != nil {
		if over, overN, err = Overflows(g, e, enc, opt.Held, mask); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", e.File, err)
		}
	}
	g = nil // the interpreter's float32 copy of the weights is done with
	weights := opt.Weights
	if opt.Params == nil {
		weights = search.solvedWeights()
	}
	if err := setWeights(m, weights); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", e.File, err)
	}
	calib, err := t.Collect(e, pos.Calib, false)
	if err != nil {
		return nil, nil, err
	}
	res := &GraphResult{Name: e.Name, Dir: e.Name + ".aimet", Samples: len(calib), Observed: len(pos.Observe), Held: len(pos.Held),
		Activations: len(enc.Activations), Params: len(enc.Params), Patterns: len(plan.Patterns), Tied: tied, Search: searched,
		RangePolicies: policies(enc), Overflows: over, OverflowTensors: overN}
	var solved *onnxpb.ModelProto
	if len(weights) > 0 {
		solved = m
	}
	if err := res.write(out, src, externalFile(dir, e), solved, e, enc, calib); err != nil {
		return nil, nil, err
	}
	qm, err := QDQModel(m, enc, plan.Params)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", e.File, err)
	}
	info, err := onnxio.WriteFile(filepath.Join(out, QDQDir, e.File), onnxio.Model{Proto: qm}, onnxio.WriteOptions{})
	if err != nil {
		return nil, nil, err
	}
	qe := e
	qe.SHA256, qe.Bytes, qe.ExternalData = info.SHA256, info.Size, nil
	return res, &qe, nil
}

// maskRanges are graph e's attention mask inputs at their fixed range
// [clip, 0]: the runtime's mask_value saturates to its low end on purpose.
func maskRanges(e onnxgraph.GraphEntry, clip float64) qnn.Ranges {
	r := qnn.Ranges{}
	for _, in := range e.Inputs {
		if strings.HasPrefix(in.Name, "attention_mask") {
			r[in.Name] = [2]float64{clip, 0}
		}
	}
	return r
}

// feeds are a sample's graph inputs as onnxeval values, the inputs of
// fixed (the attention mask) clamped to their ranges as calibration feeds
// them.
func feeds(s Sample, fixed qnn.Ranges) map[string]onnxeval.Value {
	ins := map[string]onnxeval.Value{}
	for name, t := range s.Feeds {
		shape := make([]int, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int(d)
		}
		v := onnxeval.Value{Shape: shape, F: t.F32, I: t.I64}
		if fr, ok := fixed[name]; ok {
			v.F = clamp(t.F32, fr[0], fr[1])
		}
		ins[name] = v
	}
	return ins
}

// observe runs the graph on one sample and widens the range of every
// activation of the plan, the mask clamped to its fixed range, and hands
// every value to taps.
func observe(g *onnxeval.Graph, plan *qnn.EncodingPlan, s Sample, fixed, r qnn.Ranges, taps ...func(string, onnxeval.Value)) error {
	want := plan.ActSet()
	if _, err := g.Run(feeds(s, fixed), func(name string, v onnxeval.Value) {
		if want[name] && v.F != nil {
			r.Observe(name, v.F)
		}
		for _, tap := range taps {
			tap(name, v)
		}
	}); err != nil {
		return fmt.Errorf("position %d: %w", s.Pos, err)
	}
	return nil
}

func clamp(v []float32, lo, hi float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(math.Max(lo, math.Min(hi, float64(x))))
	}
	return out
}

// write puts the graph's .aimet folder (with its weights file ext, when
// it has one) and npz under out.
func (res *GraphResult) write(out, src, ext string, solved *onnxpb.ModelProto, e onnxgraph.GraphEntry, enc *qnn.Encodings, calib []Sample) error {
	dir := filepath.Join(out, res.Dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	onnxName := e.Name + ".onnx"
	if solved != nil {
		// The graph with its solved weights, written whole (its weights
		// are no longer the export's file).
		info, err := onnxio.WriteFile(filepath.Join(dir, onnxName), onnxio.Model{Proto: solved}, onnxio.WriteOptions{})
		if err != nil {
			return err
		}
		if info.External != nil {
			res.Files = append(res.Files, res.Dir+"/"+filepath.Base(info.External.Name))
		}
	} else if err := copyFile(src, filepath.Join(dir, onnxName)); err != nil {
		return err
	}
	if ext != "" && solved == nil {
		if err := linkOrCopy(ext, filepath.Join(dir, filepath.Base(ext))); err != nil {
			return err
		}
		res.Files = append(res.Files, res.Dir+"/"+filepath.Base(ext))
	}
	data, err := enc.Marshal()
	if err != nil {
		return err
	}
	encName := e.Name + ".encodings"
	if err := os.WriteFile(filepath.Join(dir, encName), data, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(out, CalibDir), 0o755); err != nil {
		return err
	}
	res.CalibFile = CalibDir + "/" + e.Name + ".npz"
	f, err := os.OpenFile(filepath.Join(out, res.CalibFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	names := make([]string, len(e.Inputs))
	for i, in := range e.Inputs {
		names[i] = in.Name
	}
	err = WriteNPZ(bw, names, calib)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", res.CalibFile, err)
	}
	res.Files = append([]string{res.Dir + "/" + onnxName, res.Dir + "/" + encName}, res.Files...)
	for _, name := range append(append([]string(nil), res.Files...), res.CalibFile) {
		st, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			return err
		}
		res.Bytes += st.Size()
	}
	return nil
}

func copyFile(src, dst string) error {
	in, _, err := infile.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

// WriteQDQManifest writes the QDQ folder's manifest.json: the export's
// manifest with each graph's sha256 and size those of its QDQ graph, so the
// folder is an export any runner (verify's, eval --export) can run; the
// prefill graphs' QDQ graphs, when the export has them, under "prefill".
func WriteQDQManifest(out string, man *onnxgraph.Manifest, graphs, prefill []onnxgraph.GraphEntry) error {
	q := *man
	q.Producer = "sparkconv qnn-bundle (QDQ simulation)"
	q.Graphs = graphs
	if man.Prefill != nil {
		q.Prefill = &onnxgraph.Prefill{Tokens: man.Prefill.Tokens, Graphs: prefill}
	}
	data, err := q.Marshal()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, QDQDir, onnxgraph.ManifestFile), data, 0o644)
}

// Bundle is bundle.json.
type Bundle struct {
	Format       string                  `json:"format"`
	Version      int                     `json:"version"`
	Precision    string                  `json:"precision"`
	Recipe       *BundleRecipe           `json:"recipe,omitempty"`
	WeightBits   int                     `json:"weight_bits"`
	ActBits      int                     `json:"activation_bits"`
	EncodingsVer string                  `json:"encodings_version"`
	Export       BundleExport            `json:"export"`
	Calibration  BundleCalibration       `json:"calibration"`
	Mask         BundleMask              `json:"mask"`
	Simulation   *BundleSimulation       `json:"simulation,omitempty"`
	Prefill      *BundlePrefill          `json:"prefill,omitempty"`
	Graphs       map[string]*GraphResult `json:"graphs"`
	GraphOrder   []string                `json:"graph_order"`
	// PromoteBelow is the worst-sequence SNR under which a layer graph was
	// rebuilt with PromotedBits weights (0: none was), Promoted those
	// graphs, in graph order.
	PromoteBelow  float64  `json:"promote_below_db,omitempty"`
	Promoted      []string `json:"promoted,omitempty"`
	Forced        bool     `json:"forced,omitempty"`
	ForcedBecause string   `json:"forced_because,omitempty"`
}

// BundleExport names the export the bundle was made from.
type BundleExport struct {
	ManifestSHA256 string `json:"manifest_sha256"`
	Context        int    `json:"context"`
	Layout         string `json:"layout"`
	Granularity    string `json:"granularity"`
}

// BundleCalibration records what was calibrated.
type BundleCalibration struct {
	Source     string `json:"source"`
	TextSHA256 string `json:"text_sha256"`
	Samples    int    `json:"samples"`
	Tokens     int    `json:"tokens"`
	Observed   []int  `json:"observed_positions"`
	// Sequences are the samples of the calibration text traced as
	// sequences of their own (each from position 0, as a conversation
	// starts) whose activations at their positions widen the ranges
	// beside Observed's.
	Sequences []HeldOutSequence `json:"sequences,omitempty"`
	Positions []int             `json:"positions"`
	// HeldOut are the positions the simulation scores in the longest
	// held-out window (each sequence's own are in HeldOutSequences),
	// HeldOutFiles the held-out texts read (the --held-out-samples files
	// or the built-in held-out text, with their sha256) and
	// HeldOutSequences their samples, each scored as a sequence of its
	// own: the per-sequence SNRs and sample indices of graphs refer to
	// this list.
	HeldOut          []int             `json:"held_out_positions"`
	HeldOutFiles     []HeldOutFile     `json:"held_out_files"`
	HeldOutSequences []HeldOutSequence `json:"held_out_sequences"`
	// Headroom is the factor every 16-bit activation's observed range was
	// widened by (RangeOptions.Headroom).
	Headroom float64 `json:"headroom"`
	// HeadroomTensors are the tensors given a headroom of their own in
	// place of Headroom (RangeOptions.Wider): by name or last name part.
	HeadroomTensors map[string]float64 `json:"headroom_tensors,omitempty"`
	// Kernels is the kernel family that ran the capture's forward
	// (kernels.Family): the ranges are byte-identical per family.
	Kernels string `json:"kernels"`
	// Timings are not part of bundle.json (its bytes depend only on the
	// inputs); the command reports them.
	Seconds          float64 `json:"-"`
	CalibrateSeconds float64 `json:"-"`
}

// BundleMask says how the additive mask is encoded.
type BundleMask struct {
	MaskValue    float64    `json:"mask_value"`
	EncodedRange [2]float64 `json:"encoded_range"`
	Note         string     `json:"note"`
}

// BundleSimulation describes the QDQ run: the lowest pooled SNR of a
// layer graph (MinSNR) and the lowest worst-sequence SNR of one
// (MinSeqSNR, of graph MinSeqGraph), which BarDB applies to.
type BundleSimulation struct {
	Runtime     string  `json:"runtime"`
	Optimize    string  `json:"ort_optimize"`
	Seconds     float64 `json:"-"`
	MinSNR      float64 `json:"min_layer_snr_db"`
	MinSeqSNR   float64 `json:"min_layer_sequence_snr_db"`
	MinSeqGraph string  `json:"min_layer_sequence_graph"`
	BarDB       float64 `json:"bar_db"`
}

// isLayer reports whether the bar applies to a graph: layer and block
// graphs (and their prefill graphs), not the embedding or the head.
func (r *GraphResult) isLayer() bool {
	return r.Kind == onnxgraph.KindLayer || r.Kind == onnxgraph.KindBlock
}

// lowest is the lowest finite value of f over the layer graphs, in graph
// order, and its graph (+Inf and "" when none has one).
func (b *Bundle) lowest(f func(*GraphResult) *float64) (float64, string) {
	v, name := math.Inf(1), ""
	for _, n := range b.GraphOrder {
		r := b.Graphs[n]
		if x := f(r); r.isLayer() && x != nil && *x < v {
			v, name = *x, n
		}
	}
	return v, name
}

// Refusal says why the bundle is below the bar ("" when it is not): the
// layer graph whose worst held-out sequence simulates lowest, when that is
// below BarDB, with the sequence and its dB. The pooled SNR never hides a
// sequence: one sequence driven out of the ranges refuses the bundle.
func (b *Bundle) Refusal() string {
	v, name := b.lowest(func(r *GraphResult) *float64 { return r.SNRWorstSeq })
	if name == "" || v >= BarDB {
		return ""
	}
	r := b.Graphs[name]
	seq := fmt.Sprintf("held-out sequence %d", r.WorstSeq)
	if r.WorstSeq >= 0 && r.WorstSeq < len(b.Calibration.HeldOutSequences) {
		s := b.Calibration.HeldOutSequences[r.WorstSeq]
		seq += fmt.Sprintf(" (%s sample %d)", s.Source, s.Sample)
	}
	pooled := "+Inf"
	if r.SNR != nil {
		pooled = fmt.Sprintf("%.2f", *r.SNR)
	}
	return fmt.Sprintf("%s simulates at %.2f dB on %s in %s, %s dB pooled over the %d held-out sequences (bar %.0f dB on every sequence: below it a layer is unusable on the device, where calibrated w8a8 measures 5.1 dB and w8a16 36.9)",
		b.Precision, v, name, seq, pooled, len(b.Calibration.HeldOutSequences), BarDB)
}

// Marshal returns bundle.json's bytes.
func (b *Bundle) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
