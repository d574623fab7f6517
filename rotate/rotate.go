package rotate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"

	"sparkconv/convert"
	"sparkconv/dtype"
	"sparkconv/forward"
	"sparkconv/infile"
	"sparkconv/kernels"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// ConfigKey is the config.json key that records the rotation (kept by
// every build made from the rotated checkpoint).
const ConfigKey = "sparkconv_rotation"

// Options of one rotation.
type Options struct {
	convert.Options
	Seed uint64
	// DType of the written float tensors; "" keeps each tensor's own.
	DType dtype.DType
	// Smooth, when Alpha > 0, also smooths every down_proj input (smooth.go).
	Smooth Smoothing
	// Log gets the warnings (on the calibration text); nil discards them.
	Log io.Writer
}

// Check refuses option values Run cannot take, naming the field.
func (o Options) Check() error {
	if err := o.Smooth.Check(); err != nil {
		return fmt.Errorf("rotate: Smooth.%w", err)
	}
	return nil
}

// Run writes the rotated checkpoint of o.Model into o.Out.
func Run(ctx context.Context, o Options) (*convert.Report, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	if err := notRotated(o.Model); err != nil {
		return nil, err
	}
	// Every read goes through Model.Raw, which refuses NaN/Inf itself, so
	// the up-front scan (one more read of every weight) is skipped.
	j, err := convert.StartAsRead(ctx, o.Options, "rotate")
	if err != nil {
		return nil, err
	}
	defer j.Close()
	c := j.Model.Config
	rot, err := New(c.HiddenSize, o.Seed)
	if err != nil {
		return nil, err
	}
	w := &writer{j: j, rot: rot, qt: rot.Transposed(), dt: o.DType, norms: map[string][]float32{}}
	j.Report.Method = "residual rotation (QuaRot R1): " + rot.String() + "; norms folded into the linears that read them"
	meta := rot.meta()
	if o.Smooth.Alpha > 0 || o.Smooth.Auto {
		sm, err := downScales(j.Model, o.Model, o.Smooth, func(d []float32) []float32 { return w.left(d, c.HiddenSize) }, log)
		if err != nil {
			return nil, fmt.Errorf("down_proj smoothing: %w", err)
		}
		w.down = sm.s
		meta["down_proj_smoothing"] = sm.meta(o.Smooth)
		alpha := fmt.Sprint(o.Smooth.Alpha)
		if o.Smooth.Auto {
			alpha = fmt.Sprintf("per layer %v", sm.alphas)
		}
		j.Report.Method += fmt.Sprintf("; down_proj inputs smoothed (alpha %s, %d tokens)", alpha, sm.tokens)
	}
	j.Report.Settings = map[string]any{"rotation": meta}
	var tensors []safetensors.Tensor
	src := map[string]string{}
	for _, s := range c.Tensors() {
		t, err := w.tensor(s)
		if err != nil {
			return nil, err
		}
		tensors = append(tensors, t)
		src[t.Name] = s.Name
	}
	if c.TieWordEmbeddings {
		tensors = append(tensors, w.head(spark.EmbedName))
	}
	return j.Finish(tensors, src, map[string]any{"tie_word_embeddings": false, ConfigKey: meta})
}

// notRotated refuses a checkpoint whose config.json records a rotation
// already: rotating it again would replace that record, and with it what
// every build made from it says was done.
func notRotated(dir string) error {
	data, err := infile.ReadFile(filepath.Join(dir, "config.json"), infile.ConfigMax)
	if err != nil {
		return err
	}
	var c map[string]json.RawMessage
	if json.Unmarshal(data, &c) != nil || c[ConfigKey] == nil {
		return nil // LoadConfig names what is wrong with it
	}
	var r struct {
		Kind string `json:"kind"`
		Seed uint64 `json:"seed"`
	}
	_ = json.Unmarshal(c[ConfigKey], &r)
	return fmt.Errorf("%s is already rotated (config.json records %s: %s, seed %d): rotating it again would replace that record; rotate the original checkpoint instead", dir, ConfigKey, r.Kind, r.Seed)
}

// meta is the rotation as config.json and the report record it.
func (r *Rotation) meta() map[string]any {
	m := map[string]any{"kind": r.Kind, "seed": r.Seed, "order": r.N,
		"applies_to": "residual stream: embed_tokens·Q; q_k_v_proj, g_proj, gate_proj, up_proj, lm_head W·diag(norm)·Q; o_proj, down_proj Qᵀ·W; norms 1"}
	if r.Construction != "" {
		m["construction"] = r.Construction
	}
	return m
}

// writer produces the rotated tensors of one job.
type writer struct {
	j   *convert.Job
	rot *Rotation
	qt  []float32 // Qᵀ
	dt  dtype.DType
	// down[i] are layer i's down_proj smoothing scales (nil: none).
	down  [][]float32
	norms map[string][]float32 // norm weights in float32, by name (norm)
	mu    sync.Mutex           // guards norms
}

// tensor is the rotated version of the input tensor s.
func (w *writer) tensor(s spark.TensorSpec) (safetensors.Tensor, error) {
	switch s.Kind {
	case spark.KindEmbedding:
		return w.out(s.Name, s.Name, true, func(v []float32, _, rows int) ([]float32, error) { return w.right(v, rows), nil }), nil
	case spark.KindNorm:
		return w.out(s.Name, s.Name, true, func(v []float32, _, _ int) ([]float32, error) {
			for i := range v {
				v[i] = 1
			}
			return v, nil
		}), nil
	case spark.KindHead:
		return w.head(spark.HeadName), nil
	}
	module := strings.TrimPrefix(s.Module(), spark.LayerModule(s.Layer, ""))
	var smooth []float32 // the layer's down_proj smoothing scales: up_proj's rows / s, down_proj's columns · s
	if w.down != nil && (module == spark.MLPUp || module == spark.MLPDown) {
		smooth = w.down[s.Layer]
	}
	if in, ok := forward.InputOf(module); ok && in.Norm != "" {
		norm := spark.LayerWeight(s.Layer, in.Norm)
		return w.out(s.Name, s.Name, true, func(v []float32, r0, rows int) ([]float32, error) {
			o, err := w.folded(v, rows, norm)
			if err == nil && smooth != nil {
				divideRows(o, smooth[r0:r0+rows])
			}
			return o, err
		}), nil
	}
	if module == spark.OProj || module == spark.MLPDown {
		return w.out(s.Name, s.Name, false, func(v []float32, _, rows int) ([]float32, error) {
			if smooth != nil {
				quant.ScaleColumns(v, smooth)
			}
			return w.left(v, rows), nil
		}), nil
	}
	return safetensors.Tensor{}, fmt.Errorf("%s: no rotation rule for this tensor", s.Name)
}

// divideRows divides row r of the row-major w [len(s), *] by s[r].
func divideRows(w []float32, s []float32) {
	n := len(w) / len(s)
	for r, d := range s {
		for k := range w[r*n : (r+1)*n] {
			w[r*n+k] /= d
		}
	}
}

// head is lm_head = W·diag(w_final)·Q, W the input's head (the embedding
// when tied).
func (w *writer) head(from string) safetensors.Tensor {
	return w.out(spark.HeadName, from, true, func(v []float32, r0, rows int) ([]float32, error) { return w.folded(v, rows, spark.NormName) })
}

// rowBlock is how many values of a row-wise transform are held in float32
// at once (16 MiB), so the embedding never exists as a whole float32 copy.
const rowBlock = 1 << 22

// out is the output tensor name computed by f from the input tensor from
// (its float32 values, rows of the last dimension). A rowwise f maps each
// row on its own and runs on blocks of rows; r0 is the block's first row.
func (w *writer) out(name, from string, rowwise bool, f func(v []float32, r0, rows int) ([]float32, error)) safetensors.Tensor {
	info, _ := w.j.Model.Info(from)
	dt := info.DType
	if w.dt != "" {
		dt = w.dt
	}
	cols := int(info.Shape[len(info.Shape)-1])
	rows := int(info.NumElements()) / cols
	block := rows
	if rowwise {
		block = max(1, rowBlock/cols)
	}
	return safetensors.Tensor{
		Name: name, DType: dt, Shape: info.Shape,
		Produce: func() ([]byte, error) {
			in, raw, err := w.j.Model.Raw(from)
			if err != nil {
				return nil, err
			}
			res := make([]byte, 0, int(info.NumElements())*dt.Size())
			isz := in.DType.Size()
			v := make([]float32, min(block, rows)*cols)
			for r0 := 0; r0 < rows; r0 += block {
				r := min(block, rows-r0)
				if err := dtype.ToFloat32(v[:r*cols], raw[r0*cols*isz:(r0+r)*cols*isz], in.DType); err != nil {
					return nil, fmt.Errorf("%s: %w", from, err)
				}
				o, err := f(v[:r*cols], r0, r)
				if err != nil {
					return nil, err
				}
				b, err := dtype.FromFloat32(o, dt)
				if err != nil {
					return nil, err
				}
				res = append(res, b...)
			}
			// Weights near their dtype's largest value can sum past it.
			if err := safetensors.CheckFinite(safetensors.TensorInfo{Name: name, DType: dt, Shape: info.Shape}, res); err != nil {
				return nil, fmt.Errorf("%w after the rotation: the rotated weights pass %s's range; nothing written", err, dt)
			}
			return res, nil
		},
	}
}

// folded is W·diag(norm)·Q for W [rows, n].
func (w *writer) folded(v []float32, rows int, norm string) ([]float32, error) {
	g, err := w.norm(norm)
	if err != nil {
		return nil, err
	}
	n := w.rot.N
	for r := range rows {
		row := v[r*n : (r+1)*n]
		for k := range row {
			row[k] *= g[k]
		}
	}
	return w.right(v, rows), nil
}

// norm is the norm weight name in float32, decoded once per writer (each
// is read by two linears, over many row blocks).
func (w *writer) norm(name string) ([]float32, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g, ok := w.norms[name]; ok {
		return g, nil
	}
	_, g, err := w.j.Model.Float32(name)
	if err != nil {
		return nil, err
	}
	w.norms[name] = g
	return g, nil
}

// right is W·Q for W [rows, n].
func (w *writer) right(v []float32, rows int) []float32 {
	n := w.rot.N
	out := make([]float32, rows*n)
	kernels.MatMulNN(out, v, w.rot.Q, rows, n, n)
	return out
}

// left is Qᵀ·W for W [n, cols].
func (w *writer) left(v []float32, rows int) []float32 {
	cols := len(v) / rows
	n := w.rot.N
	out := make([]float32, n*cols)
	kernels.MatMulNN(out, w.qt, v, n, cols, n)
	return out
}
