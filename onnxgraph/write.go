package onnxgraph

import (
	"fmt"
	"path/filepath"

	"sparkconv/onnxio"
	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

// Model returns the graph as an onnxio.Model: nodes, inputs and outputs,
// every initializer's header, and its bytes streamed from their source
// when the model is written.
func (b *Builder) Model() onnxio.Model {
	g := &onnxpb.GraphProto{Node: b.nodes, Name: proto.String(b.name)}
	data := make([]onnxio.Data, len(b.inits))
	for i, in := range b.inits {
		g.Initializer = append(g.Initializer, in.t)
		data[i] = in.data
	}
	for _, v := range b.inputs {
		g.Input = append(g.Input, valueInfo(v))
	}
	for _, v := range b.outputs {
		g.Output = append(g.Output, valueInfo(v))
	}
	m := &onnxpb.ModelProto{
		IrVersion:    proto.Int64(IRVersion),
		ProducerName: proto.String(Producer),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(Opset)}},
		Graph:        g,
	}
	for _, kv := range b.meta {
		m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(kv[0]), Value: proto.String(kv[1])})
	}
	return onnxio.Model{Proto: m, Data: data}
}

// Marshal returns the self-contained model bytes.
func (b *Builder) Marshal() ([]byte, error) { return onnxio.Marshal(b.Model()) }

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

// WriteFile writes the model as dir/name (onnxio.WriteFile: all or nothing,
// fsynced, external data past the threshold) and returns its size and
// SHA-256.
func (b *Builder) WriteFile(dir, name string, opt onnxio.WriteOptions) (onnxio.FileInfo, error) {
	info, err := onnxio.WriteFile(filepath.Join(dir, name), b.Model(), opt)
	if err != nil {
		return onnxio.FileInfo{}, fmt.Errorf("graph %s: %w", b.name, err)
	}
	return info, nil
}
