package onnxgraph

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"sparkconv/onnxpb"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// MaxProtoSize is protobuf's limit on one serialized message (2 GiB - 1);
// a bigger model must keep its weights in an external data file.
const MaxProtoSize = math.MaxInt32

// ExternalAlign is the alignment of every tensor's offset in an external
// data file (docs/ExternalData.md: a multiple of 4096 so it can be mmapped).
const ExternalAlign = 4096

// WriteOptions controls WriteFile.
type WriteOptions struct {
	// ExternalThreshold: when the self-contained file would be larger than
	// this many bytes, initializers of at least MinExternal bytes move to
	// "<file>.data". 0 means MaxProtoSize.
	ExternalThreshold int64
	// MinExternal is the smallest initializer moved out; 0 means 1024.
	MinExternal int64
}

// FileInfo describes one written file.
type FileInfo struct {
	Name   string `json:"file"`
	Size   int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// External is the external data file, when one was needed.
	External *FileInfo `json:"external_data,omitempty"`
}

var marshalOpts = proto.MarshalOptions{Deterministic: true}

// segment is a piece of the serialized graph: fixed bytes or streamed data.
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

// extLoc places an initializer in the external data file.
type extLoc struct {
	location       string
	offset, length int64
}

func appendField(dst []byte, num protowire.Number, msg proto.Message) []byte {
	m, err := marshalOpts.Marshal(msg)
	if err != nil {
		panic(fmt.Sprintf("onnxgraph: marshal: %v", err)) // only on invalid UTF-8, which names never hold
	}
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	return protowire.AppendBytes(dst, m)
}

// graphSegments lays out the GraphProto bytes in field-number order, which
// is what deterministic Marshal produces. ext[i] != nil moves initializer i
// to external data.
func (b *Builder) graphSegments(ext []*extLoc) []segment {
	var segs []segment
	var cur []byte
	for _, n := range b.nodes {
		cur = appendField(cur, 1, n)
	}
	cur = protowire.AppendTag(cur, 2, protowire.BytesType)
	cur = protowire.AppendString(cur, b.name)
	for i, in := range b.inits {
		if ext != nil && ext[i] != nil {
			cur = appendField(cur, 5, externalTensor(in.t, ext[i]))
			continue
		}
		hdr, err := marshalOpts.Marshal(in.t)
		if err != nil {
			panic(fmt.Sprintf("onnxgraph: marshal: %v", err))
		}
		size := in.data.Size()
		raw := protowire.AppendTag(nil, 9, protowire.BytesType)
		raw = protowire.AppendVarint(raw, uint64(size))
		cur = protowire.AppendTag(cur, 5, protowire.BytesType)
		cur = protowire.AppendVarint(cur, uint64(int64(len(hdr)+len(raw))+size))
		cur = append(cur, hdr...)
		cur = append(cur, raw...)
		segs = append(segs, segment{b: cur}, segment{data: in.data})
		cur = nil
	}
	for _, v := range b.inputs {
		cur = appendField(cur, 11, valueInfo(v))
	}
	for _, v := range b.outputs {
		cur = appendField(cur, 12, valueInfo(v))
	}
	return append(segs, segment{b: cur})
}

func externalTensor(t *onnxpb.TensorProto, loc *extLoc) *onnxpb.TensorProto {
	e := proto.Clone(t).(*onnxpb.TensorProto)
	kv := func(k, v string) *onnxpb.StringStringEntryProto {
		return &onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)}
	}
	e.ExternalData = []*onnxpb.StringStringEntryProto{
		kv("location", loc.location),
		kv("offset", strconv.FormatInt(loc.offset, 10)),
		kv("length", strconv.FormatInt(loc.length, 10)),
	}
	e.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
	return e
}

// modelSegments returns the whole ModelProto as segments.
func (b *Builder) modelSegments(ext []*extLoc) []segment {
	head, err := marshalOpts.Marshal(&onnxpb.ModelProto{
		IrVersion:    proto.Int64(IRVersion),
		ProducerName: proto.String(Producer),
	})
	if err != nil {
		panic(err)
	}
	graph := b.graphSegments(ext)
	var glen int64
	for _, s := range graph {
		glen += s.size()
	}
	head = protowire.AppendTag(head, 7, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(glen))
	tailMsg := &onnxpb.ModelProto{OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(Opset)}}}
	for _, kv := range b.meta {
		tailMsg.MetadataProps = append(tailMsg.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(kv[0]), Value: proto.String(kv[1])})
	}
	tail, err := marshalOpts.Marshal(tailMsg)
	if err != nil {
		panic(err)
	}
	segs := append([]segment{{b: head}}, graph...)
	return append(segs, segment{b: tail})
}

func totalSize(segs []segment) int64 {
	var n int64
	for _, s := range segs {
		n += s.size()
	}
	return n
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

// Encode writes the self-contained model (every weight inline) to w.
func (b *Builder) Encode(w io.Writer) error {
	segs := b.modelSegments(nil)
	if n := totalSize(segs); n > MaxProtoSize {
		return fmt.Errorf("graph %s: %d bytes is over protobuf's 2 GiB limit; use WriteFile, which moves weights to external data", b.name, n)
	}
	return writeSegments(w, segs)
}

// Marshal returns the self-contained model bytes.
func (b *Builder) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	if err := b.Encode(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Proto returns the model as a message with every weight inline (for tests
// and lints of small graphs; it holds all weights in memory).
func (b *Builder) Proto() (*onnxpb.ModelProto, error) {
	data, err := b.Marshal()
	if err != nil {
		return nil, err
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("graph %s: re-reading own bytes: %w", b.name, err)
	}
	return m, nil
}

// planExternal chooses which initializers move out, and where.
func (b *Builder) planExternal(location string, minBytes int64) []*extLoc {
	ext := make([]*extLoc, len(b.inits))
	var off int64
	for i, in := range b.inits {
		n := in.data.Size()
		if n < minBytes {
			continue
		}
		off = (off + ExternalAlign - 1) / ExternalAlign * ExternalAlign
		ext[i] = &extLoc{location: location, offset: off, length: n}
		off += n
	}
	return ext
}

// WriteFile writes the model as dir/name (fsynced) and returns its size and
// SHA-256. When the file would pass opt.ExternalThreshold, large weights go
// to dir/name+".data" at 4096-aligned offsets, named by a relative location.
func (b *Builder) WriteFile(dir, name string, opt WriteOptions) (FileInfo, error) {
	threshold := opt.ExternalThreshold
	if threshold <= 0 {
		threshold = MaxProtoSize
	}
	minBytes := opt.MinExternal
	if minBytes <= 0 {
		minBytes = 1024
	}
	segs := b.modelSegments(nil)
	var ext []*extLoc
	if totalSize(segs) > threshold {
		ext = b.planExternal(name+".data", minBytes)
		segs = b.modelSegments(ext)
		if n := totalSize(segs); n > MaxProtoSize {
			return FileInfo{}, fmt.Errorf("graph %s: %d bytes even with external data", b.name, n)
		}
	}
	info, err := writeHashed(filepath.Join(dir, name), func(w io.Writer) error { return writeSegments(w, segs) })
	if err != nil {
		return FileInfo{}, fmt.Errorf("writing %s: %w", name, err)
	}
	info.Name = name
	if ext != nil {
		ei, err := writeHashed(filepath.Join(dir, name+".data"), func(w io.Writer) error { return b.writeExternal(w, ext) })
		if err != nil {
			return FileInfo{}, fmt.Errorf("writing %s.data: %w", name, err)
		}
		ei.Name = name + ".data"
		info.External = &ei
	}
	return info, nil
}

func (b *Builder) writeExternal(w io.Writer, ext []*extLoc) error {
	var pos int64
	zeros := make([]byte, ExternalAlign)
	for i, loc := range ext {
		if loc == nil {
			continue
		}
		if _, err := w.Write(zeros[:loc.offset-pos]); err != nil {
			return err
		}
		n, err := b.inits[i].data.WriteTo(w)
		if err != nil {
			return fmt.Errorf("initializer %s: %w", b.inits[i].t.GetName(), err)
		}
		if n != loc.length {
			return fmt.Errorf("initializer %s wrote %d bytes, declared %d", b.inits[i].t.GetName(), n, loc.length)
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

// writeHashed creates path, runs fill on a buffered writer that also
// hashes, flushes and fsyncs.
func writeHashed(path string, fill func(io.Writer) error) (FileInfo, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return FileInfo{}, err
	}
	ch := &countingHash{h: sha256.New()}
	bw := bufio.NewWriterSize(io.MultiWriter(f, ch), 1<<20)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return FileInfo{}, err
	}
	return FileInfo{Size: ch.n, SHA256: hex.EncodeToString(ch.h.Sum(nil))}, nil
}

// HashFile returns the size and SHA-256 of a file.
func HashFile(path string) (FileInfo, error) {
	f, err := os.Open(path)
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
