package onnxio

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"sparkconv/infile"
	"sparkconv/onnxpb"
	"sparkconv/outdir"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// MaxProtoSize is protobuf's limit on one serialized message (2 GiB - 1);
// a bigger model must keep its weights in an external data file.
const MaxProtoSize = math.MaxInt32

// ExternalAlign is the alignment of every tensor's offset in an external
// data file (ONNX's external-data rules ask for a multiple of 4096, so a
// loader can mmap it).
const ExternalAlign = 4096

// Data is an initializer's raw bytes, streamed from wherever they live (a
// mapped safetensors file, a converted copy) when the model is written.
type Data interface {
	Size() int64
	WriteTo(w io.Writer) (int64, error)
}

// Bytes is Data held in memory.
type Bytes []byte

// Size is len(b).
func (b Bytes) Size() int64 { return int64(len(b)) }

// WriteTo writes b.
func (b Bytes) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// Model is a ModelProto whose initializers may stream their raw_data:
// Data[i], when set, is Proto.Graph.Initializer[i]'s raw_data (the tensor
// itself then carries no data field). A nil or short Data streams nothing:
// every tensor is written as it is in Proto.
type Model struct {
	Proto *onnxpb.ModelProto
	Data  []Data
}

var marshalOpts = proto.MarshalOptions{Deterministic: true}

// segment is a piece of the serialized model: fixed bytes or streamed data.
type segment struct {
	b    []byte
	data Data
}

func (s segment) size() int64 {
	if s.data != nil {
		return s.data.Size()
	}
	return int64(len(s.b))
}

func sizeOf(segs []segment) int64 {
	var n int64
	for _, s := range segs {
		n += s.size()
	}
	return n
}

// extLoc places an initializer in the external data file.
type extLoc struct {
	location       string
	offset, length int64
}

func mustMarshal(msg proto.Message) []byte {
	b, err := marshalOpts.Marshal(msg)
	if err != nil {
		panic(fmt.Sprintf("onnxio: marshal: %v", err)) // only on invalid UTF-8 in a string field
	}
	return b
}

func (m Model) data(i int) Data {
	if i < len(m.Data) {
		return m.Data[i]
	}
	return nil
}

// segments lays the model out in field-number order with unknown fields
// last, which is what deterministic Marshal produces (protobuf-go's
// documented order for known fields; TestEncodeMatchesMarshal checks it).
// ext[i] != nil moves initializer i to external data.
func (m Model) segments(ext []*extLoc) []segment {
	p := m.Proto
	head := mustMarshal(&onnxpb.ModelProto{IrVersion: p.IrVersion, ProducerName: p.ProducerName, ProducerVersion: p.ProducerVersion,
		Domain: p.Domain, ModelVersion: p.ModelVersion, DocString: p.DocString})
	tailMsg := &onnxpb.ModelProto{OpsetImport: p.OpsetImport, MetadataProps: p.MetadataProps}
	tailMsg.ProtoReflect().SetUnknown(p.ProtoReflect().GetUnknown())
	tail := mustMarshal(tailMsg)
	g := p.GetGraph()
	if g == nil {
		return []segment{{b: head}, {b: tail}}
	}
	graph := m.graphSegments(g, ext)
	head = protowire.AppendTag(head, 7, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(sizeOf(graph)))
	segs := append([]segment{{b: head}}, graph...)
	return append(segs, segment{b: tail})
}

func (m Model) graphSegments(g *onnxpb.GraphProto, ext []*extLoc) []segment {
	var segs []segment
	cur := mustMarshal(&onnxpb.GraphProto{Node: g.Node, Name: g.Name})
	field := func(t *onnxpb.TensorProto) {
		cur = protowire.AppendTag(cur, 5, protowire.BytesType)
		cur = protowire.AppendBytes(cur, mustMarshal(t))
	}
	for i, t := range g.GetInitializer() {
		d := m.data(i)
		switch {
		case d == nil:
			field(t)
		case ext != nil && ext[i] != nil:
			field(externalTensor(t, ext[i]))
		default:
			lo, hi := splitTensor(t)
			raw := protowire.AppendTag(nil, 9, protowire.BytesType)
			raw = protowire.AppendVarint(raw, uint64(d.Size()))
			cur = protowire.AppendTag(cur, 5, protowire.BytesType)
			cur = protowire.AppendVarint(cur, uint64(int64(len(lo)+len(raw)+len(hi))+d.Size()))
			cur = append(append(cur, lo...), raw...)
			segs = append(segs, segment{b: cur}, segment{data: d})
			cur = hi
		}
	}
	rest := &onnxpb.GraphProto{DocString: g.DocString, Input: g.Input, Output: g.Output, ValueInfo: g.ValueInfo,
		MetadataProps: g.MetadataProps}
	rest.ProtoReflect().SetUnknown(g.ProtoReflect().GetUnknown())
	cur = append(cur, mustMarshal(rest)...)
	return append(segs, segment{b: cur})
}

// splitTensor returns t's encoding without raw_data, cut where field 9
// (raw_data) belongs: the fields numbered below it, and those above it
// with the unknown fields.
func splitTensor(t *onnxpb.TensorProto) (lo, hi []byte) {
	l := &onnxpb.TensorProto{Dims: t.Dims, DataType: t.DataType, Segment: t.Segment, FloatData: t.FloatData,
		Int32Data: t.Int32Data, StringData: t.StringData, Int64Data: t.Int64Data, Name: t.Name}
	h := &onnxpb.TensorProto{DoubleData: t.DoubleData, Uint64Data: t.Uint64Data, DocString: t.DocString,
		ExternalData: t.ExternalData, DataLocation: t.DataLocation, MetadataProps: t.MetadataProps}
	h.ProtoReflect().SetUnknown(t.ProtoReflect().GetUnknown())
	return mustMarshal(l), mustMarshal(h)
}

func externalTensor(t *onnxpb.TensorProto, loc *extLoc) *onnxpb.TensorProto {
	e := proto.Clone(t).(*onnxpb.TensorProto)
	kv := func(k, v string) *onnxpb.StringStringEntryProto {
		return &onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)}
	}
	e.RawData = nil
	e.ExternalData = []*onnxpb.StringStringEntryProto{
		kv("location", loc.location),
		kv("offset", strconv.FormatInt(loc.offset, 10)),
		kv("length", strconv.FormatInt(loc.length, 10)),
	}
	e.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
	return e
}

func writeSegments(w io.Writer, segs []segment) error {
	for _, s := range segs {
		if s.data == nil {
			if _, err := w.Write(s.b); err != nil {
				return err
			}
			continue
		}
		n, err := s.data.WriteTo(w)
		if err != nil {
			return err
		}
		if n != s.data.Size() {
			return fmt.Errorf("initializer data wrote %d bytes, declared %d", n, s.data.Size())
		}
	}
	return nil
}

// Size is the length of the self-contained encoding.
func (m Model) Size() int64 { return sizeOf(m.segments(nil)) }

// Encode writes m's deterministic protobuf encoding (every weight inline),
// byte for byte what proto.MarshalOptions{Deterministic: true}.Marshal
// returns for the same message with Data folded into raw_data, streaming
// one initializer at a time so a large model is never held twice. It
// returns the number of bytes written.
func Encode(w io.Writer, m Model) (int64, error) {
	segs := m.segments(nil)
	n := sizeOf(segs)
	if n > MaxProtoSize {
		return 0, fmt.Errorf("graph %s: %d bytes is over protobuf's 2 GiB limit; write it with WriteFile, which moves weights to external data", m.Proto.GetGraph().GetName(), n)
	}
	cw := &countWriter{w: w}
	err := writeSegments(cw, segs)
	return cw.n, err
}

// Marshal returns the self-contained encoding.
func Marshal(m Model) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := Encode(&buf, m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteOptions controls WriteFile.
type WriteOptions struct {
	// ExternalThreshold: when the self-contained file would be larger than
	// this many bytes, streamed initializers of at least MinExternal bytes
	// move to "<file>.data". 0 means MaxProtoSize.
	ExternalThreshold int64
	// MinExternal is the smallest initializer moved out; 0 means 1024.
	MinExternal int64
	// Force replaces existing files Owner recognises; without it an
	// existing file is an error naming it.
	Force bool
	// Owner recognises a file Force may replace (nil: none).
	Owner outdir.Owner
	// Inputs are the files and folders the command reads: the output may
	// not be, lie inside or contain one.
	Inputs []string
}

// FileInfo describes one written file.
type FileInfo struct {
	Name   string `json:"file"`
	Size   int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// External is the external data file, when one was needed.
	External *FileInfo `json:"external_data,omitempty"`
}

func (m Model) planExternal(location string, minBytes int64) []*extLoc {
	inits := m.Proto.GetGraph().GetInitializer()
	ext := make([]*extLoc, len(inits))
	var off int64
	for i := range inits {
		d := m.data(i)
		if d == nil || d.Size() < minBytes {
			continue
		}
		off = (off + ExternalAlign - 1) / ExternalAlign * ExternalAlign
		ext[i] = &extLoc{location: location, offset: off, length: d.Size()}
		off += d.Size()
	}
	return ext
}

// WriteFile writes the model to path all-or-nothing (a temporary file in the
// same folder, fsynced, renamed into place) and returns its size and
// SHA-256. When the file would pass opt.ExternalThreshold, large streamed
// weights go to path+".data" at 4096-aligned offsets, named by a relative
// location, written the same way before the model.
func WriteFile(path string, m Model, opt WriteOptions) (FileInfo, error) {
	if path == "" {
		return FileInfo{}, errors.New("output file not given")
	}
	threshold := opt.ExternalThreshold
	if threshold <= 0 {
		threshold = MaxProtoSize
	}
	minBytes := opt.MinExternal
	if minBytes <= 0 {
		minBytes = 1024
	}
	name := filepath.Base(path)
	segs := m.segments(nil)
	var ext []*extLoc
	if sizeOf(segs) > threshold {
		ext = m.planExternal(name+".data", minBytes)
		segs = m.segments(ext)
		if n := sizeOf(segs); n > MaxProtoSize {
			return FileInfo{}, fmt.Errorf("graph %s: %d bytes even with external data", m.Proto.GetGraph().GetName(), n)
		}
	}
	var extInfo *FileInfo
	if ext != nil {
		ei, err := writeAtomic(path+".data", opt, func(w io.Writer) error { return m.writeExternal(w, ext) })
		if err != nil {
			return FileInfo{}, err
		}
		extInfo = &ei
	}
	info, err := writeAtomic(path, opt, func(w io.Writer) error { return writeSegments(w, segs) })
	if err != nil {
		return FileInfo{}, err
	}
	info.External = extInfo
	return info, nil
}

func (m Model) writeExternal(w io.Writer, ext []*extLoc) error {
	var pos int64
	zeros := make([]byte, ExternalAlign)
	inits := m.Proto.GetGraph().GetInitializer()
	for i, loc := range ext {
		if loc == nil {
			continue
		}
		if _, err := w.Write(zeros[:loc.offset-pos]); err != nil {
			return err
		}
		n, err := m.Data[i].WriteTo(w)
		if err != nil {
			return fmt.Errorf("initializer %s: %w", inits[i].GetName(), err)
		}
		if n != loc.length {
			return fmt.Errorf("initializer %s wrote %d bytes, declared %d", inits[i].GetName(), n, loc.length)
		}
		pos = loc.offset + n
	}
	return nil
}

// countingHash tracks size and SHA-256 of what passes through.
type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

// writeAtomic fills a temporary file beside path through a buffered,
// hashing writer and puts it in place under outdir.File's rules (fsync,
// rename, an existing path replaced only with Force and only when Owner
// recognises it, never one of Inputs).
func writeAtomic(path string, opt WriteOptions, fill func(io.Writer) error) (FileInfo, error) {
	out, err := outdir.NewFile(path, opt.Force, opt.Owner, opt.Inputs...)
	if err != nil {
		return FileInfo{}, err
	}
	h := sha256.New()
	var size int64
	err = out.Write(func(f *os.File) error {
		bw := outdir.NewStream(f, h) // hashed on its own goroutine, flushed as it goes
		if err := fill(bw); err != nil {
			bw.Discard()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		size = bw.Size()
		if err := bw.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Name: filepath.Base(path), Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// HashFile returns the size and SHA-256 of a file.
func HashFile(path string) (FileInfo, error) {
	f, _, err := infile.Open(path)
	if err != nil {
		return FileInfo{}, err
	}
	defer f.Close()
	ch := &countingHash{h: sha256.New()}
	if _, err := io.Copy(ch, f); err != nil {
		return FileInfo{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return FileInfo{Name: filepath.Base(path), Size: ch.n, SHA256: hex.EncodeToString(ch.h.Sum(nil))}, nil
}

// sharedTensor is one initializer of a shared data file: where it lies and
// which model's Data writes it.
type sharedTensor struct {
	loc   *extLoc
	t     *onnxpb.TensorProto
	model int
	index int
}

// WriteShared writes models that share their weights (a decode-step graph
// and its prefill graph): every streamed initializer of at least
// opt.MinExternal bytes goes once into dataPath, at a 4096-aligned offset,
// in the order the models first hold them, and every model holding an
// initializer of that name refers to the same location, offset and length.
// Initializers of one name must agree in type, dims and size (the first
// model's bytes are written). dataPath and paths lie in one folder (the
// location is relative); each file is written as WriteFile writes it. It
// returns the data file's info and each model's (External set).
func WriteShared(dataPath string, paths []string, models []Model, opt WriteOptions) (FileInfo, []FileInfo, error) {
	if len(paths) != len(models) || len(models) == 0 {
		return FileInfo{}, nil, fmt.Errorf("WriteShared: %d paths for %d models", len(paths), len(models))
	}
	minBytes := opt.MinExternal
	if minBytes <= 0 {
		minBytes = 1024
	}
	location := filepath.Base(dataPath)
	shared := map[string]*sharedTensor{}
	var order []*sharedTensor
	exts := make([][]*extLoc, len(models))
	var off int64
	for i, m := range models {
		if filepath.Dir(paths[i]) != filepath.Dir(dataPath) {
			return FileInfo{}, nil, fmt.Errorf("WriteShared: %s is not in the folder of %s", paths[i], dataPath)
		}
		inits := m.Proto.GetGraph().GetInitializer()
		exts[i] = make([]*extLoc, len(inits))
		for k, t := range inits {
			d := m.data(k)
			if d == nil || d.Size() < minBytes {
				continue
			}
			if s, ok := shared[t.GetName()]; ok {
				if s.t.GetDataType() != t.GetDataType() || !slices.Equal(s.t.GetDims(), t.GetDims()) || s.loc.length != d.Size() {
					return FileInfo{}, nil, fmt.Errorf("initializer %s: %s has type %d dims %v (%d bytes), %s type %d dims %v (%d bytes): shared weights must be equal",
						t.GetName(), filepath.Base(paths[s.model]), s.t.GetDataType(), s.t.GetDims(), s.loc.length, filepath.Base(paths[i]), t.GetDataType(), t.GetDims(), d.Size())
				}
				exts[i][k] = s.loc
				continue
			}
			off = (off + ExternalAlign - 1) / ExternalAlign * ExternalAlign
			s := &sharedTensor{loc: &extLoc{location: location, offset: off, length: d.Size()}, t: t, model: i, index: k}
			off += d.Size()
			shared[t.GetName()] = s
			order = append(order, s)
			exts[i][k] = s.loc
		}
	}
	for i, m := range models {
		if n := sizeOf(m.segments(exts[i])); n > MaxProtoSize {
			return FileInfo{}, nil, fmt.Errorf("graph %s: %d bytes even with external data", m.Proto.GetGraph().GetName(), n)
		}
	}
	data, err := writeAtomic(dataPath, opt, func(w io.Writer) error {
		var pos int64
		zeros := make([]byte, ExternalAlign)
		for _, s := range order {
			if _, err := w.Write(zeros[:s.loc.offset-pos]); err != nil {
				return err
			}
			n, err := models[s.model].Data[s.index].WriteTo(w)
			if err != nil {
				return fmt.Errorf("initializer %s: %w", s.t.GetName(), err)
			}
			if n != s.loc.length {
				return fmt.Errorf("initializer %s wrote %d bytes, declared %d", s.t.GetName(), n, s.loc.length)
			}
			pos = s.loc.offset + n
		}
		return nil
	})
	if err != nil {
		return FileInfo{}, nil, err
	}
	infos := make([]FileInfo, len(models))
	for i, m := range models {
		segs := m.segments(exts[i])
		info, err := writeAtomic(paths[i], opt, func(w io.Writer) error { return writeSegments(w, segs) })
		if err != nil {
			return FileInfo{}, nil, err
		}
		d := data
		info.External = &d
		infos[i] = info
	}
	return data, infos, nil
}
