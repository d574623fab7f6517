package onnxio

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"sparkconv/infile"
	"sparkconv/onnxpb"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// ReadModelFile parses an .onnx file. The file is memory-mapped rather than
// read into the heap, so a model is held once (as parsed messages), not
// twice. External data files are not opened.
func ReadModelFile(path string) (*onnxpb.ModelProto, error) {
	f, st, err := infile.Open(path) // regular files only, never blocks on a FIFO
	if err != nil {
		return nil, err
	}
	defer f.Close()
	switch {
	case st.IsDir():
		return nil, fmt.Errorf("%s is a folder, not an .onnx file", path)
	case st.Size() == 0:
		return nil, fmt.Errorf("%s is empty", path)
	case st.Size() > math.MaxInt32:
		return nil, fmt.Errorf("%s is %d bytes, above protobuf's 2 GiB limit: not an ONNX model", path, st.Size())
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	defer unix.Munmap(data)
	m := &onnxpb.ModelProto{}
	// Unmarshal copies bytes and strings out of data, so unmapping after
	// it returns is safe.
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("%s: not an ONNX ModelProto: %w", path, err)
	}
	return m, nil
}

// ExternalLocations lists, sorted and once each, the external data files
// the model's initializers refer to (relative to the model's folder).
func ExternalLocations(m *onnxpb.ModelProto) []string {
	set := map[string]bool{}
	for _, t := range m.GetGraph().GetInitializer() {
		for _, kv := range t.GetExternalData() {
			if kv.GetKey() == "location" {
				set[kv.GetValue()] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ReadStructure reads an .onnx file's model, graph, nodes, inputs, outputs
// and initializers, streaming, but drops the raw_data of every initializer
// larger than maxRaw bytes (its name, type and dims stay). It is what a
// lint of a multi-GB export needs: every node and constant as written, in
// a few MB of memory instead of a copy of the weights.
func ReadStructure(path string, maxRaw int) (*onnxpb.ModelProto, error) {
	f, st, err := infile.Open(path) // regular files only, never blocks on a FIFO
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Skipped payloads are seeked over, not read: a fresh export's weights
	// are not in the page cache (it writes with O_DIRECT) and reading them
	// back would cost a read of the whole model.
	d := &structDecoder{r: bufio.NewReaderSize(f, 1<<20), maxRaw: maxRaw, file: f}
	m, err := d.model(st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// DecodeStructure is ReadStructure over size bytes of r.
func DecodeStructure(r *bufio.Reader, size int64, maxRaw int) (*onnxpb.ModelProto, error) {
	d := &structDecoder{r: r, maxRaw: maxRaw}
	return d.model(size)
}

func (d *structDecoder) model(size int64) (*onnxpb.ModelProto, error) {
	var graph *onnxpb.GraphProto
	rest, _, err := d.message(size, 7, func(n int64) (any, error) {
		g, err := d.graph(n)
		if err != nil {
			return nil, err
		}
		if graph == nil {
			graph = g
		} else {
			proto.Merge(graph, g) // a repeated singular message merges, as protobuf does
		}
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(rest, m); err != nil {
		return nil, fmt.Errorf("model fields: %w", err)
	}
	if graph != nil {
		if m.Graph != nil { // a graph field of another wire type cannot decode
			proto.Merge(m.Graph, graph)
		} else {
			m.Graph = graph
		}
	}
	return m, nil
}

type structDecoder struct {
	r      *bufio.Reader
	maxRaw int
	file   io.ReadSeeker // r's source, when skipping may seek
}

// skip passes over n bytes: through the buffer, and by seeking the file
// past whatever the buffer does not hold.
func (d *structDecoder) skip(n int64) error {
	if b := int64(d.r.Buffered()); d.file != nil && n > b {
		d.r.Discard(int(b))
		if _, err := d.file.Seek(n-b, io.SeekCurrent); err != nil {
			return errTruncated
		}
		d.r.Reset(d.file)
		return nil
	}
	if _, err := d.r.Discard(int(n)); err != nil {
		return errTruncated
	}
	return nil
}

var errTruncated = errors.New("truncated protobuf")

func (d *structDecoder) varint() (uint64, int, error) {
	v, raw, err := d.varintRaw(nil)
	return v, len(raw), err
}

// varintRaw reads a varint and also appends its bytes as written (copied
// fields keep non-minimal encodings byte for byte).
func (d *structDecoder) varintRaw(dst []byte) (uint64, []byte, error) {
	var v uint64
	start := len(dst)
	for i := 0; i < 10; i++ {
		b, err := d.r.ReadByte()
		if err != nil {
			return 0, dst[start:], errTruncated
		}
		dst = append(dst, b)
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, dst, nil
		}
	}
	return 0, dst, errors.New("varint overflow")
}

// message walks size bytes of fields. Fields numbered special (with
// length-delimited type) go to sub, whose results are collected (the last
// one for a singular field, all of them via the callback's own state);
// every other field is copied verbatim into rest.
func (d *structDecoder) message(size int64, special protowire.Number, sub func(n int64) (any, error)) (rest []byte, last any, err error) {
	for size > 0 {
		mark := len(rest)
		tag, withTag, err := d.varintRaw(rest)
		if err != nil {
			return nil, nil, err
		}
		n := len(withTag) - mark
		size -= int64(n)
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		if num <= 0 {
			return nil, nil, fmt.Errorf("invalid field number %d", num)
		}
		if num == special && typ == protowire.BytesType {
			l, n, err := d.varint()
			if err != nil {
				return nil, nil, err
			}
			size -= int64(n)
			if int64(l) > size || l > 1<<62 {
				return nil, nil, errTruncated
			}
			if last, err = sub(int64(l)); err != nil {
				return nil, nil, err
			}
			size -= int64(l)
			continue
		}
		rest = withTag
		var used int64
		if rest, used, err = d.copyValue(rest, typ, size); err != nil {
			return nil, nil, err
		}
		size -= used
	}
	if size < 0 {
		return nil, nil, errTruncated
	}
	return rest, last, nil
}

// copyValue appends one field value of wire type typ to dst.
func (d *structDecoder) copyValue(dst []byte, typ protowire.Type, limit int64) ([]byte, int64, error) {
	var n int64
	switch typ {
	case protowire.VarintType:
		start := len(dst)
		dst, err := d.varintRawOnly(dst)
		return dst, int64(len(dst) - start), err
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
		start := len(dst)
		l, dst, err := d.varintRaw(dst)
		if err != nil {
			return nil, 0, err
		}
		k := int64(len(dst) - start)
		if int64(l) > limit-k || l > 1<<62 {
			return nil, 0, errTruncated
		}
		dst, err = d.copyBytes(dst, int64(l))
		return dst, k + int64(l), err
	default:
		return nil, 0, fmt.Errorf("unsupported wire type %d", typ)
	}
	if n > limit {
		return nil, 0, errTruncated
	}
	dst, err := d.copyBytes(dst, n)
	return dst, n, err
}

func (d *structDecoder) varintRawOnly(dst []byte) ([]byte, error) {
	_, dst, err := d.varintRaw(dst)
	return dst, err
}

func (d *structDecoder) copyBytes(dst []byte, n int64) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	if _, err := io.ReadFull(d.r, dst[start:]); err != nil {
		return nil, errTruncated
	}
	return dst, nil
}

// graph decodes a GraphProto, routing initializers through tensor.
func (d *structDecoder) graph(size int64) (*onnxpb.GraphProto, error) {
	var inits []*onnxpb.TensorProto
	rest, _, err := d.message(size, 5, func(n int64) (any, error) {
		t, err := d.tensor(n)
		if err == nil {
			inits = append(inits, t)
		}
		return nil, err
	})
	if err != nil {
		return nil, err
	}
	g := &onnxpb.GraphProto{}
	if err := proto.Unmarshal(rest, g); err != nil {
		return nil, fmt.Errorf("graph fields: %w", err)
	}
	g.Initializer = inits
	return g, nil
}

// tensor decodes a TensorProto, skipping a raw_data payload above maxRaw.
func (d *structDecoder) tensor(size int64) (*onnxpb.TensorProto, error) {
	rest, raw, err := d.message(size, 9, func(n int64) (any, error) {
		if n > int64(d.maxRaw) {
			return nil, d.skip(n)
		}
		b, err := d.copyBytes(nil, n)
		return b, err
	})
	if err != nil {
		return nil, err
	}
	t := &onnxpb.TensorProto{}
	if err := proto.Unmarshal(rest, t); err != nil {
		return nil, fmt.Errorf("initializer fields: %w", err)
	}
	if b, ok := raw.([]byte); ok {
		t.RawData = b
	}
	return t, nil
}

// ReadModelWithData parses an .onnx file and reads every external
// initializer's bytes into its raw_data (from the file its relative
// location names, beside the model), so the model holds every weight
// inline, as a self-contained file would. The location must be a plain
// file name and offset and length must lie inside that file.
func ReadModelWithData(path string) (*onnxpb.ModelProto, error) {
	m, err := ReadModelFile(path)
	if err != nil {
		return nil, err
	}
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, t := range m.GetGraph().GetInitializer() {
		if t.GetDataLocation() != onnxpb.TensorProto_EXTERNAL {
			continue
		}
		loc, off, length := "", int64(0), int64(-1)
		for _, kv := range t.GetExternalData() {
			switch kv.GetKey() {
			case "location":
				loc = kv.GetValue()
			case "offset":
				off, err = strconv.ParseInt(kv.GetValue(), 10, 64)
			case "length":
				length, err = strconv.ParseInt(kv.GetValue(), 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: initializer %s: external data %s %q: %w", path, t.GetName(), kv.GetKey(), kv.GetValue(), err)
			}
		}
		if loc == "" || filepath.Base(loc) != loc || loc == "." || loc == ".." {
			return nil, fmt.Errorf("%s: initializer %s: external data location %q is not a file name beside the model", path, t.GetName(), loc)
		}
		f, ok := files[loc]
		if !ok {
			if f, _, err = infile.Open(filepath.Join(filepath.Dir(path), loc)); err != nil {
				return nil, fmt.Errorf("%s: initializer %s: %w", path, t.GetName(), err)
			}
			files[loc] = f
		}
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if length < 0 {
			length = st.Size() - off
		}
		if off < 0 || length < 0 || off+length > st.Size() {
			return nil, fmt.Errorf("%s: initializer %s: bytes %d..%d outside %s (%d bytes)", path, t.GetName(), off, off+length, loc, st.Size())
		}
		raw := make([]byte, length)
		if _, err := f.ReadAt(raw, off); err != nil {
			return nil, fmt.Errorf("%s: initializer %s: reading %s: %w", path, t.GetName(), loc, err)
		}
		t.RawData, t.ExternalData, t.DataLocation = raw, nil, nil
	}
	return m, nil
}
