package onnxgraph

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sparkconv/infile"
	"sparkconv/onnxio"
)

// ManifestFile is the manifest's name inside an export folder.
const ManifestFile = "manifest.json"

// ManifestFormat is the value of the manifest's "format" key.
const ManifestFormat = "spark-onnx-decode-step"

// Graph kinds.
const (
	KindEmbed = "embed"
	KindLayer = "layer"
	KindBlock = "block"
	KindHead  = "head"
)

// Cache layouts of a layer graph.
const (
	LayoutRing = "ring"
	LayoutRoll = "roll"
	LayoutAuto = "auto"
)

// TensorSpec is a manifest tensor object.
type TensorSpec struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
	DType string  `json:"dtype"`
}

// LayerInfo holds the per-layer keys of a layer graph (inline) or of one
// entry of a block graph's "layers".
type LayerInfo struct {
	Layer      int     `json:"layer"`
	LayerType  string  `json:"layer_type"`
	Layout     string  `json:"layout"`
	CacheSlots int     `json:"cache_slots"`
	RotaryDims int     `json:"rotary_dims"`
	RopeTheta  float64 `json:"rope_theta"`
}

// GraphEntry is a manifest graph object.
type GraphEntry struct {
	Name string `json:"name"`
	File string `json:"file"`
	Kind string `json:"kind"`
	// LayerInfo is set (and inlined) for layer graphs only.
	*LayerInfo
	Layers []LayerInfo `json:"layers,omitempty"`
	Tied   *bool       `json:"tied,omitempty"`
	// Decode, on a prefill graph, names the decode-step graph it shares
	// its weights file (ExternalData) with.
	Decode       string           `json:"decode,omitempty"`
	Opset        int              `json:"opset"`
	SHA256       string           `json:"sha256"`
	Bytes        int64            `json:"bytes,omitempty"`
	ExternalData *onnxio.FileInfo `json:"external_data,omitempty"`
	Inputs       []TensorSpec     `json:"inputs"`
	Outputs      []TensorSpec     `json:"outputs"`
	// Values maps graph values to the reference forward's points (the
	// names its Observer and calibration files use), so an encodings file
	// or a calibration capture can target them by a stable name.
	Values []ValueName `json:"values,omitempty"`
}

// ModelLevel is ValueName.Layer for values outside any layer (as
// forward.ModelLevel).
const ModelLevel = -1

// Source is the checkpoint an export came from (SourceFingerprint).
type Source struct {
	Fingerprint string `json:"fingerprint"`
	Method      string `json:"method"`
}

// ValueName says which point of the reference forward a graph value holds:
// Point is forward.Point's name ("q_rope", "mlp_act", "final_norm") or
// "embed" (the embedding row) or one of the graph-only values ("q_scaled",
// "keys", "values", "scores_masked"); Layer is the layer, -1 for model-level
// values.
type ValueName struct {
	Name  string `json:"name"`
	Layer int    `json:"layer"`
	Point string `json:"point"`
}

// LayerInfos returns the per-layer keys of a layer or block graph.
func (g *GraphEntry) LayerInfos() []LayerInfo {
	if g.LayerInfo != nil {
		return []LayerInfo{*g.LayerInfo}
	}
	return g.Layers
}

// Manifest is manifest.json (docs/formats.md#manifestjson).
type Manifest struct {
	Format      string                     `json:"format"`
	Version     int                        `json:"version"`
	Producer    string                     `json:"producer"`
	Opset       int                        `json:"opset"`
	Context     int                        `json:"context"`
	DType       string                     `json:"dtype"`
	MaskValue   float64                    `json:"mask_value"`
	GELU        string                     `json:"gelu,omitempty"`
	Granularity string                     `json:"granularity,omitempty"`
	Layout      string                     `json:"layout,omitempty"`
	Config      map[string]json.RawMessage `json:"config,omitempty"`
	// Partial marks an export of a subset of the layers (--layers).
	Partial bool `json:"partial,omitempty"`
	// Source identifies the checkpoint the graphs were made from.
	Source *Source      `json:"source,omitempty"`
	Graphs []GraphEntry `json:"graphs"`
	// Prefill lists the prefill graphs (export-onnx --prefill); readers
	// of the decode step alone ignore it.
	Prefill *Prefill `json:"prefill,omitempty"`
}

// Prefill is the manifest's "prefill" object: graphs that take Tokens
// tokens at once (docs/formats.md#prefill-graphs), one per embed, layer
// or block graph of Graphs (none for the head).
type Prefill struct {
	Tokens int          `json:"tokens"`
	Graphs []GraphEntry `json:"graphs"`
}

// AllGraphs returns the decode-step graphs and then the prefill graphs.
func (m *Manifest) AllGraphs() []GraphEntry {
	out := append([]GraphEntry(nil), m.Graphs...)
	if m.Prefill != nil {
		out = append(out, m.Prefill.Graphs...)
	}
	return out
}

// Marshal is the manifest's file content (indented, trailing newline;
// deterministic: config keys sorted by encoding/json).
func (m *Manifest) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ReadManifest reads and checks dir/manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	data, err := infile.ReadFile(path, infile.ManifestMax)
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ReadVerified reads dir's manifest and checks every file it lists
// against the sha256 it records (CheckFiles): what every reader of an
// export calls first, so a changed or corrupt graph is refused by name
// before ONNX Runtime or a parser sees it.
func ReadVerified(dir string) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	dirOf := map[string]string{}
	for _, g := range m.AllGraphs() {
		dirOf[g.File] = dir
	}
	if err := CheckFiles(m, dirOf); err != nil {
		return nil, err
	}
	return m, nil
}

// CheckFiles compares each graph file (and its external data file) of the
// export with the sha256 its manifest records, before anything parses it;
// dirOf gives each graph file's folder. It names every file that differs.
// A weights file that a graph and its prefill graph share is read once.
func CheckFiles(man *Manifest, dirOf map[string]string) error {
	var bad []string
	seen := map[string]bool{}
	for _, g := range man.AllGraphs() {
		dir := dirOf[g.File]
		check := func(file, want string) {
			path := filepath.Join(dir, file)
			if seen[path+"\x00"+want] {
				return
			}
			seen[path+"\x00"+want] = true
			h, err := onnxio.HashFile(filepath.Join(dir, file))
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("%s: %v", filepath.Join(dir, file), err))
			case h.SHA256 != want:
				bad = append(bad, fmt.Sprintf("%s: sha256 %s..., the manifest says %s...", filepath.Join(dir, file), h.SHA256[:12], want[:min(12, len(want))]))
			}
		}
		check(g.File, g.SHA256)
		if g.ExternalData != nil {
			check(g.ExternalData.Name, g.ExternalData.SHA256)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d files do not match their manifest (changed after the export wrote them; export again): %s", len(bad), strings.Join(bad, "; "))
	}
	return nil
}

var sha256Re = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseManifest parses manifest JSON and checks what the contract makes
// required, each problem naming its key. Consistency with the model and
// the files is CheckExport's job.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("invalid manifest JSON: %w", err)
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if m.Opset != Opset {
		bad("opset = %d, want %d", m.Opset, Opset)
	}
	if m.Context < 2 {
		bad("context = %d, must be >= 2", m.Context)
	}
	if m.DType != "float32" && m.DType != "float16" {
		bad("dtype = %q, want float32 or float16", m.DType)
	}
	if !(m.MaskValue < 0) || math.IsInf(m.MaskValue, 0) {
		bad("mask_value = %v, must be finite and negative", m.MaskValue)
	}
	if len(m.Graphs) == 0 {
		bad("graphs is empty")
	}
	names := map[string]bool{}
	errs = append(errs, checkEntries("graphs", m.Graphs, m.DType, names)...)
	errs = append(errs, checkPrefill(&m, names)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &m, nil
}

// checkEntries checks the graph objects of the list key, names defaulted
// to their files' and unique across names (which records them).
func checkEntries(key string, gs []GraphEntry, dt string, names map[string]bool) []error {
	var errs []error
	for i := range gs {
		g := &gs[i]
		if g.Name == "" {
			g.Name = strings.TrimSuffix(g.File, ".onnx")
		}
		if names[g.Name] {
			errs = append(errs, fmt.Errorf("%s[%d]: name %q used twice", key, i, g.Name))
		}
		names[g.Name] = true
		for _, e := range checkEntry(g, dt) {
			errs = append(errs, fmt.Errorf("%s[%d] (%s): %v", key, i, g.File, e))
		}
	}
	return errs
}

func checkEntry(g *GraphEntry, dt string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if g.File == "" || filepath.Base(g.File) != g.File || g.File == "." || g.File == ".." {
		bad("file %q must be a plain file name", g.File)
	}
	if !sha256Re.MatchString(g.SHA256) {
		bad("sha256 %q is not 64 lowercase hex digits", g.SHA256)
	}
	if g.Opset != 0 && g.Opset != Opset {
		bad("opset = %d, want %d", g.Opset, Opset)
	}
	switch g.Kind {
	case KindEmbed, KindHead:
		if g.LayerInfo != nil || g.Layers != nil {
			bad("%s graph carries layer keys", g.Kind)
		}
	case KindLayer:
		if g.LayerInfo == nil || g.Layers != nil {
			bad("layer graph needs the per-layer keys inline and no layers")
		}
	case KindBlock:
		if g.LayerInfo != nil || len(g.Layers) == 0 {
			bad("block graph needs layers and no inline layer keys")
		}
		for k := 1; k < len(g.Layers); k++ {
			if g.Layers[k].Layer != g.Layers[k-1].Layer+1 {
				bad("block layers not consecutive: %d after %d", g.Layers[k].Layer, g.Layers[k-1].Layer)
			}
		}
	default:
		bad("kind %q, want embed, layer, block or head", g.Kind)
	}
	for _, li := range g.LayerInfos() {
		errs = append(errs, checkLayerInfo(li)...)
	}
	for _, t := range append(append([]TensorSpec{}, g.Inputs...), g.Outputs...) {
		errs = append(errs, checkTensorSpec(t, dt)...)
	}
	if len(g.Inputs) == 0 || len(g.Outputs) == 0 {
		bad("inputs and outputs must not be empty")
	}
	return errs
}

func checkLayerInfo(li LayerInfo) []error {
	var errs []error
	if li.Layer < 0 {
		errs = append(errs, fmt.Errorf("layer %d is negative", li.Layer))
	}
	if li.LayerType != "sliding_attention" && li.LayerType != "full_attention" {
		errs = append(errs, fmt.Errorf("layer %d: layer_type %q", li.Layer, li.LayerType))
	}
	if li.Layout != LayoutRing && li.Layout != LayoutRoll {
		errs = append(errs, fmt.Errorf("layer %d: layout %q, want ring or roll", li.Layer, li.Layout))
	}
	if li.CacheSlots < 1 || li.RotaryDims < 2 || li.RotaryDims%2 != 0 || !(li.RopeTheta > 0) {
		errs = append(errs, fmt.Errorf("layer %d: cache_slots %d, rotary_dims %d, rope_theta %v out of range", li.Layer, li.CacheSlots, li.RotaryDims, li.RopeTheta))
	}
	return errs
}

func checkTensorSpec(t TensorSpec, dt string) []error {
	var errs []error
	if t.Name == "" {
		errs = append(errs, errors.New("tensor with an empty name"))
	}
	if len(t.Shape) == 0 {
		errs = append(errs, fmt.Errorf("tensor %s: empty shape", t.Name))
	}
	for _, d := range t.Shape {
		if d < 1 {
			errs = append(errs, fmt.Errorf("tensor %s: shape %v is not static and positive", t.Name, t.Shape))
			break
		}
	}
	want := dt
	if t.Name == "input_ids" {
		want = "int64"
	}
	if t.DType != want {
		errs = append(errs, fmt.Errorf("tensor %s: dtype %q, want %q", t.Name, t.DType, want))
	}
	return errs
}

// Tensor returns the graph's input or output spec by name.
func (g *GraphEntry) Tensor(name string) (TensorSpec, bool) {
	for _, t := range append(append([]TensorSpec{}, g.Inputs...), g.Outputs...) {
		if t.Name == name {
			return t, true
		}
	}
	return TensorSpec{}, false
}

// LayerSuffix is the name suffix of layer i's inputs and outputs in a
// graph of this kind: "" in a layer graph, "_L{i}" in a block graph.
func LayerSuffix(kind string, i int) string {
	if kind == KindBlock {
		return fmt.Sprintf("_L%d", i)
	}
	return ""
}

// GraphOrder is the order a token flows through an export's graphs: embed,
// the layer or block graphs by first layer, head.
func GraphOrder(man *Manifest) []GraphEntry {
	rank := func(g GraphEntry) int {
		switch g.Kind {
		case KindEmbed:
			return -1
		case KindHead:
			return 1 << 30
		}
		return g.LayerInfos()[0].Layer
	}
	gs := append([]GraphEntry(nil), man.Graphs...)
	sort.SliceStable(gs, func(a, b int) bool { return rank(gs[a]) < rank(gs[b]) })
	return gs
}
