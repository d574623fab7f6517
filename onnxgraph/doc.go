// Package onnxgraph owns writing ONNX models and running them in ONNX
// Runtime: a small graph builder (typed static-shape inputs and outputs,
// initializers streamed from their source, unique deterministic names), a
// streaming serializer whose bytes equal protobuf's deterministic Marshal
// (with external data, relative location, 4096-aligned offsets, when a file
// would pass 2 GiB), the Spark-X2.5 decode-step export that follows
// shared/spec/onnx-decode-step.md (embed, layer or block, head graphs and
// manifest.json), and a thin ONNX Runtime runner used by tests and verify.
//
// onnxgraph never imports qnn: the QNN lint reads the graphs this package
// writes, not the other way round.
package onnxgraph
