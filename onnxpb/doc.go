// Package onnxpb owns the generated Go types for the subset of the ONNX
// protobuf schema (onnx/onnx.proto) that sparkconv writes and reads:
// ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto,
// ValueInfoProto, TypeProto, TensorShapeProto, OperatorSetIdProto and
// StringStringEntryProto. Field numbers equal upstream ONNX, so the bytes
// are standard .onnx files. The proto package is sparkconv.onnx (not onnx)
// so that it can be linked beside any other generated ONNX package.
//
// onnx.pb.go is generated and committed; regenerating needs protoc 3.21+ and
// protoc-gen-go v1.36.12 on PATH:
//
//	go generate ./onnxpb/
package onnxpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative onnx.proto
