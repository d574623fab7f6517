package qnn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"sparkconv/onnxpb"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// ReadModelFile parses an .onnx file. The file is memory-mapped rather than
// read into the heap, so a model is held once (as parsed messages), not
// twice. External data files are not opened.
func ReadModelFile(path string) (*onnxpb.ModelProto, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
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

// EncodeModel writes m's deterministic protobuf encoding, byte for byte
// what proto.MarshalOptions{Deterministic: true}.Marshal returns, streaming
// the graph's initializers one at a time so that a large model is never
// held twice. It returns the number of bytes written.
//
// It relies on protobuf-go writing known fields in field-number order and
// unknown fields last; TestEncodeModelMatchesMarshal checks it.
func EncodeModel(w io.Writer, m *onnxpb.ModelProto) (int64, error) {
	cw := &countWriter{w: w}
	opt := proto.MarshalOptions{Deterministic: true}
	var buf []byte // reused: one tensor's encoding at a time
	write := func(msg proto.Message) error {
		var err error
		buf, err = opt.MarshalAppend(buf[:0], msg)
		if err != nil {
			return err
		}
		_, err = cw.Write(buf)
		return err
	}
	head := &onnxpb.ModelProto{IrVersion: m.IrVersion, ProducerName: m.ProducerName, ProducerVersion: m.ProducerVersion,
		Domain: m.Domain, ModelVersion: m.ModelVersion, DocString: m.DocString}
	if err := write(head); err != nil {
		return cw.n, err
	}
	if g := m.GetGraph(); g != nil {
		hdr := protowire.AppendTag(nil, 7, protowire.BytesType)
		hdr = protowire.AppendVarint(hdr, uint64(opt.Size(g)))
		if _, err := cw.Write(hdr); err != nil {
			return cw.n, err
		}
		if err := write(&onnxpb.GraphProto{Node: g.Node, Name: g.Name}); err != nil {
			return cw.n, err
		}
		for _, t := range g.GetInitializer() {
			b := protowire.AppendTag(nil, 5, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(opt.Size(t)))
			if _, err := cw.Write(b); err != nil {
				return cw.n, err
			}
			if err := write(t); err != nil {
				return cw.n, err
			}
		}
		rest := &onnxpb.GraphProto{DocString: g.DocString, Input: g.Input, Output: g.Output, ValueInfo: g.ValueInfo,
			MetadataProps: g.MetadataProps}
		rest.ProtoReflect().SetUnknown(g.ProtoReflect().GetUnknown())
		if err := write(rest); err != nil {
			return cw.n, err
		}
	}
	tail := &onnxpb.ModelProto{OpsetImport: m.OpsetImport, MetadataProps: m.MetadataProps}
	tail.ProtoReflect().SetUnknown(m.ProtoReflect().GetUnknown())
	err := write(tail)
	return cw.n, err
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

// WriteModelFile writes m to path all-or-nothing: it encodes into a
// temporary file in the same folder, fsyncs it, and renames it over path.
// An existing path is replaced only when force is set. It returns the file
// size.
func WriteModelFile(path string, m *onnxpb.ModelProto, force bool) (int64, error) {
	if path == "" {
		return 0, errors.New("output file not given")
	}
	if err := checkTarget(path, force); err != nil {
		return 0, err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".sparkconv-tmp-*")
	if err != nil {
		return 0, err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	n, err := EncodeModel(bw, m)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := checkTarget(path, force); err != nil { // it may have appeared meanwhile
		return 0, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, err
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return n, fmt.Errorf("fsync %s: %w", dir, err)
		}
	}
	return n, nil
}

func checkTarget(path string, force bool) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("%s is a folder", path)
	case !force:
		return fmt.Errorf("%s already exists (use --force to replace it)", path)
	}
	return nil
}
