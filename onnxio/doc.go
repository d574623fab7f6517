// Package onnxio is sparkconv's one ONNX file I/O: reading a model whole
// (ReadModelFile, memory-mapped) or as structure only (ReadStructure: every
// node and small constant, the big weights' bytes dropped), and writing one
// (Encode, WriteFile) as protobuf's deterministic encoding, streaming each
// initializer's bytes from its source so a multi-GB model is never held
// twice, with external data (relative location, 4096-aligned offsets) when a
// file would pass 2 GiB, all-or-nothing through a temporary file and a
// rename. The graph builder (onnxgraph), the QNN lint and sanitizer (qnn)
// and the bundle all read and write through it.
package onnxio
