// Package safetensors reads and writes Hugging Face safetensors checkpoints,
// tensor by tensor: a validating header parser, memory-mapped files, sharded
// checkpoints with model.safetensors.index.json, and a streaming writer whose
// tensors are produced on demand.
//
// The header parser is our own (not nlpodyssey's Deserialize, which needs the
// whole file in memory and rejects files holding any FP8 tensor). The writer
// uses github.com/nlpodyssey/safetensors' SerializeToWriter, which orders
// tensors exactly as the reference Rust library does.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"sparkconv/dtype"
	"sparkconv/infile"
)

// MaxHeaderSize is the largest JSON header accepted (100 MB), as the
// reference implementation enforces.
const MaxHeaderSize = 100 << 20

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name  string
	DType dtype.DType
	Shape []int64
	// Begin and End are byte offsets into the data section.
	Begin, End int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Header is a parsed, validated safetensors header.
type Header struct {
	// Size is the JSON header length; data starts at 8+Size.
	Size     int64
	Metadata map[string]string
	// Tensors sorted by data offset.
	Tensors []TensorInfo
	byName  map[string]int
}

// Tensor returns the named tensor's info.
func (h *Header) Tensor(name string) (TensorInfo, bool) {
	i, ok := h.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

// DataStart is the file offset of the data section.
func (h *Header) DataStart() int64 { return 8 + h.Size }

// ReadHeader reads and validates the header of a safetensors file of
// fileSize bytes from r.
func ReadHeader(r io.ReaderAt, fileSize int64) (*Header, error) {
	var lenBuf [8]byte
	if fileSize < 8 {
		return nil, fmt.Errorf("file is %d bytes, too short for the 8-byte header length", fileSize)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header length %d exceeds the 100 MB limit", n)
	}
	if int64(n) > fileSize-8 {
		return nil, fmt.Errorf("header length %d runs past the end of the file (%d bytes)", n, fileSize)
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, 8); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	return ParseHeader(buf, fileSize-8-int64(n))
}

type rawTensor struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// ParseHeader parses the JSON header text and validates every tensor
// against a data section of dataSize bytes: known dtype, non-negative shape,
// offsets inside the data section, byte length = product(shape) x dtype
// size, no overlaps and no holes, no duplicate names.
func ParseHeader(text []byte, dataSize int64) (*Header, error) {
	h := &Header{Size: int64(len(text)), byName: map[string]int{}}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("header is not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("header JSON: %w", err)
		}
		name, _ := tok.(string)
		if name == "__metadata__" {
			if h.Metadata != nil {
				return nil, fmt.Errorf("header has __metadata__ twice")
			}
			h.Metadata = map[string]string{}
			if err := dec.Decode(&h.Metadata); err != nil {
				return nil, fmt.Errorf("header __metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		var rt rawTensor
		if err := dec.Decode(&rt); err != nil {
			return nil, fmt.Errorf("header JSON: tensor %q: %w", name, err)
		}
		if _, dup := h.byName[name]; dup {
			return nil, fmt.Errorf("tensor %q appears twice in the header", name)
		}
		ti, err := checkTensor(name, rt, dataSize)
		if err != nil {
			return nil, err
		}
		h.byName[name] = len(h.Tensors)
		h.Tensors = append(h.Tensors, ti)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("header JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("header has trailing data after the JSON object")
	}
	if err := checkLayout(h, dataSize); err != nil {
		return nil, err
	}
	return h, nil
}

func checkTensor(name string, rt rawTensor, dataSize int64) (TensorInfo, error) {
	if name == "" {
		return TensorInfo{}, errors.New("tensor with an empty name")
	}
	d, err := dtype.Parse(rt.DType)
	if err != nil {
		return TensorInfo{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	if rt.Shape == nil {
		return TensorInfo{}, fmt.Errorf("tensor %q: missing shape", name)
	}
	if len(rt.DataOffsets) != 2 {
		return TensorInfo{}, fmt.Errorf("tensor %q: data_offsets must hold 2 numbers, has %d", name, len(rt.DataOffsets))
	}
	ti := TensorInfo{Name: name, DType: d, Shape: rt.Shape, Begin: rt.DataOffsets[0], End: rt.DataOffsets[1]}
	want := int64(d.Size())
	for _, s := range rt.Shape {
		if s < 0 {
			return TensorInfo{}, fmt.Errorf("tensor %q: negative dimension in shape %v", name, rt.Shape)
		}
		if s > 0 && want > (1<<62)/s {
			return TensorInfo{}, fmt.Errorf("tensor %q: shape %v overflows", name, rt.Shape)
		}
		want *= s
	}
	if ti.Begin < 0 || ti.End < ti.Begin || ti.End > dataSize {
		return TensorInfo{}, fmt.Errorf("tensor %q: data_offsets [%d, %d] outside the data section of %d bytes", name, ti.Begin, ti.End, dataSize)
	}
	if ti.End-ti.Begin != want {
		return TensorInfo{}, fmt.Errorf("tensor %q: %s%v needs %d bytes, data_offsets span %d", name, d, rt.Shape, want, ti.End-ti.Begin)
	}
	return ti, nil
}

// checkLayout sorts tensors by offset and rejects overlaps and holes, as the
// reference implementation does: tensors must tile the data section exactly.
func checkLayout(h *Header, dataSize int64) error {
	sort.SliceStable(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End
	})
	pos := int64(0)
	for i, t := range h.Tensors {
		h.byName[t.Name] = i
		if t.Begin < pos {
			return fmt.Errorf("tensor %q: data [%d, %d] overlaps %q", t.Name, t.Begin, t.End, h.Tensors[i-1].Name)
		}
		if t.Begin > pos {
			return fmt.Errorf("tensor %q: hole of %d bytes before its data at offset %d", t.Name, t.Begin-pos, t.Begin)
		}
		pos = t.End
	}
	if pos != dataSize {
		return fmt.Errorf("data section is %d bytes but tensors cover %d", dataSize, pos)
	}
	return nil
}

// MetadataOwner is an outdir.Owner accepting a safetensors file whose
// header metadata holds key = value: how a file sparkconv wrote (an eval
// base file, a forward dump) is told from any other before --force
// replaces it.
func MetadataOwner(key, value string) func(path string) error {
	return func(path string) error {
		f, st, err := infile.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h, err := ReadHeader(f, st.Size())
		if err != nil {
			return fmt.Errorf("not a safetensors file: %v", err)
		}
		if got := h.Metadata[key]; got != value {
			return fmt.Errorf("its safetensors metadata %s is %q, not %q", key, got, value)
		}
		return nil
	}
}
