package qnn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"sparkconv/infile"
)

// EncodingsVersion is the AIMET encodings format the bundle writes: 1.0.0,
// what qai-hub-models forces and what the QAIRT converter reads as lists
// with names (docs/qnn.md#encodings).
const EncodingsVersion = "1.0.0"

// Encoding is one AIMET 1.0.0 entry: the quantization grid of one tensor.
// Real value = (q + Offset[c]) * Scale[c] with q in [0, 2^BW - 1]; the ONNX
// zero point is -Offset. Per-tensor entries hold one scale and offset;
// per-channel ones one per output channel. An LPBQ entry (lpbq.go) is a
// per-channel BW-bit grid whose codes are CompressedBW-bit codes times
// a per-block integer scale.
type Encoding struct {
	Name    string    `json:"name"`
	DType   string    `json:"dtype"`    // always "INT": the converter treats anything else as float (docs/qnn.md#encodings)
	EncType string    `json:"enc_type"` // PER_TENSOR, PER_CHANNEL or LPBQ
	BW      int       `json:"bw"`
	IsSym   bool      `json:"is_sym"`
	Scale   []float32 `json:"scale"`
	Offset  []int32   `json:"offset"`
	// CompressedBW, BlockSize and PerBlockIntScale are LPBQ's: the codes'
	// bits, the block's length along the input dimension, and one integer
	// scale per (output channel, block), channel-major.
	CompressedBW     int     `json:"compressed_bw,omitempty"`
	BlockSize        int     `json:"block_size,omitempty"`
	PerBlockIntScale []int32 `json:"per_block_int_scale,omitempty"`
}

// Encodings is an AIMET 1.0.0 encodings file.
type Encodings struct {
	Version        string         `json:"version"`
	Activations    []Encoding     `json:"activation_encodings"`
	Params         []Encoding     `json:"param_encodings"`
	QuantizerArgs  *QuantizerArgs `json:"quantizer_args,omitempty"`
	ExcludedLayers []string       `json:"excluded_layers"`
	// Policy is, per activation, how its range was chosen (Encodings);
	// not part of the file.
	Policy map[string]RangePolicy `json:"-"`
}

// QuantizerArgs records how the encodings were computed (informational for
// the converter).
type QuantizerArgs struct {
	ActivationBitwidth int    `json:"activation_bitwidth"`
	DType              string `json:"dtype"`
	IsSymmetric        bool   `json:"is_symmetric"`
	ParamBitwidth      int    `json:"param_bitwidth"`
	PerChannel         bool   `json:"per_channel_quantization"`
	QuantScheme        string `json:"quant_scheme"`
}

// Encoding types.
const (
	PerTensor  = "PER_TENSOR"
	PerChannel = "PER_CHANNEL"
)

// AsymmetricEncoding is aimet's calculate_delta_offset for an asymmetric
// grid of bw bits over [min, max] (docs/qnn.md#encoding-grids): the range is first widened
// to hold 0 (and to at least 0.01 wide), delta = (max - min) / (2^bw - 1),
// offset = round(min / delta). 0 is then exactly on the grid.
func AsymmetricEncoding(name string, bw int, lo, hi float64) Encoding {
	lo, hi = math.Min(0, lo), math.Max(0, hi)
	hi = math.Max(hi, lo+0.01)
	delta := (hi - lo) / (math.Exp2(float64(bw)) - 1)
	off := math.RoundToEven(lo / delta)
	return Encoding{Name: name, DType: "INT", EncType: PerTensor, BW: bw, IsSym: false,
		Scale: []float32{float32(delta)}, Offset: []int32{int32(off)}}
}

// SymmetricScale is aimet's symmetric delta for absmax over bw bits:
// absmax / floor((2^bw - 1) / 2); the offset is -2^(bw-1). A zero absmax
// (an all-zero tensor) gets the smallest normal float32 so the scale stays
// positive.
func SymmetricScale(absmax float64, bw int) float32 {
	s := absmax / math.Floor((math.Exp2(float64(bw))-1)/2)
	if !(s > 0) {
		return math.SmallestNonzeroFloat32 * (1 << 23)
	}
	return float32(s)
}

// SymmetricEncoding is a symmetric grid with one scale per entry of absmax
// (one entry: per tensor; several: per channel).
func SymmetricEncoding(name string, bw int, absmax []float64) Encoding {
	e := Encoding{Name: name, DType: "INT", EncType: PerTensor, BW: bw, IsSym: true}
	if len(absmax) > 1 {
		e.EncType = PerChannel
	}
	off := -int32(1) << (bw - 1)
	for _, a := range absmax {
		e.Scale = append(e.Scale, SymmetricScale(a, bw))
		e.Offset = append(e.Offset, off)
	}
	return e
}

// MinMax returns channel c's representable range: min = offset * delta,
// max = (2^bw - 1 + offset) * delta (aimet's
// compute_min_max_given_delta_offset).
func (e Encoding) MinMax(c int) (lo, hi float64) {
	d, o := float64(e.Scale[c]), float64(e.Offset[c])
	return o * d, (math.Exp2(float64(e.BW)) - 1 + o) * d
}

// Same reports whether two encodings describe the same grid (names aside).
func (e Encoding) Same(f Encoding) bool {
	if e.BW != f.BW || e.IsSym != f.IsSym || len(e.Scale) != len(f.Scale) || len(e.Offset) != len(f.Offset) ||
		e.EncType != f.EncType || e.CompressedBW != f.CompressedBW || e.BlockSize != f.BlockSize || !slices.Equal(e.PerBlockIntScale, f.PerBlockIntScale) {
		return false
	}
	for i := range e.Scale {
		if e.Scale[i] != f.Scale[i] || e.Offset[i] != f.Offset[i] {
			return false
		}
	}
	return true
}

// Renamed returns a copy of e naming another tensor.
func (e Encoding) Renamed(name string) Encoding {
	e.Name = name
	return e
}

// Problems lists what the QAIRT converter refuses or HTP cannot run in e
// (docs/qnn.md#encodings): dtype not "INT" (then it is treated as float), bit widths
// other than 8 and 16 for activations or 4, 8, 16 for params, a missing or
// non-positive scale, scale and offset of different lengths, a per-channel
// or symmetric entry whose offset is not -2^(bw-1) (or -2^(bw-1)+1).
func (e Encoding) Problems(param bool) []string {
	var p []string
	if !strings.EqualFold(e.DType, "INT") {
		p = append(p, fmt.Sprintf("dtype %q: the converter treats anything but \"INT\" as float and does not quantize it", e.DType))
	}
	legal := map[int]bool{8: true, 16: true}
	if param && e.EncType != LPBQ {
		legal[4] = true
	}
	if !legal[e.BW] {
		p = append(p, fmt.Sprintf("bit width %d is not one HTP runs for %s (want %s)", e.BW, kindName(param), map[bool]string{true: "4, 8 or 16", false: "8 or 16"}[param]))
	}
	switch e.EncType {
	case PerTensor:
		if len(e.Scale) != 1 {
			p = append(p, fmt.Sprintf("PER_TENSOR with %d scales", len(e.Scale)))
		}
	case PerChannel:
		if !param {
			p = append(p, "PER_CHANNEL on an activation (per-channel grids are for weights)")
		}
		if !e.IsSym {
			p = append(p, "PER_CHANNEL must be symmetric (the converter requires is_sym for it)")
		}
	case LPBQ:
		p = append(p, e.lpbqProblems(param)...)
	default:
		p = append(p, fmt.Sprintf("enc_type %q (this bundle uses PER_TENSOR, PER_CHANNEL and LPBQ)", e.EncType))
	}
	if len(e.Scale) == 0 || len(e.Scale) != len(e.Offset) {
		p = append(p, fmt.Sprintf("%d scales and %d offsets", len(e.Scale), len(e.Offset)))
	}
	for i, s := range e.Scale {
		if !(s > 0) || math.IsInf(float64(s), 0) {
			p = append(p, fmt.Sprintf("scale[%d] = %v is not a positive finite number", i, s))
			break
		}
	}
	if e.IsSym && e.BW > 0 && e.BW <= 32 {
		want := -int32(1) << (e.BW - 1)
		for i, o := range e.Offset {
			if o != want && o != want+1 {
				p = append(p, fmt.Sprintf("symmetric offset[%d] = %d, the converter accepts only %d or %d", i, o, want, want+1))
				break
			}
		}
	}
	return p
}

func kindName(param bool) string {
	if param {
		return "a parameter"
	}
	return "an activation"
}

// Marshal returns the file's JSON (indented, deterministic: the entries in
// the order given, float32 scales in their shortest form).
func (f *Encodings) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ParseEncodings reads an AIMET 1.0.0 encodings file; other versions are
// refused with what this reader takes.
func ParseEncodings(data []byte) (*Encodings, error) {
	var probe struct {
		Version any `json:"version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("not an encodings JSON object: %w", err)
	}
	if v, _ := probe.Version.(string); v != EncodingsVersion {
		return nil, fmt.Errorf("encodings version %v: this reader takes %s (lists of entries with a name)", probe.Version, EncodingsVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	f := &Encodings{}
	if err := dec.Decode(f); err != nil {
		return nil, fmt.Errorf("encodings %s: %w", EncodingsVersion, err)
	}
	for i, e := range append(append([]Encoding(nil), f.Activations...), f.Params...) {
		if e.Name == "" {
			return nil, fmt.Errorf("encoding %d has no name", i)
		}
	}
	return f, nil
}

// ReadEncodings reads and parses an encodings file.
func ReadEncodings(path string) (*Encodings, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > 256<<20 {
		return nil, fmt.Errorf("%s is %d bytes; an encodings file of any real graph is far smaller", path, st.Size())
	}
	data, err := infile.ReadFile(path, 256<<20)
	if err != nil {
		return nil, err
	}
	f, err := ParseEncodings(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}
