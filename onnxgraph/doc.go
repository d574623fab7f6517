// Package onnxgraph builds ONNX graphs and owns the Spark-X2.5 decode-step
// export: a small graph builder (typed static-shape inputs and outputs,
// initializers streamed from their source, unique deterministic names,
// written through onnxio), the export that follows the decode-step contract
// (embed, layer or block, head graphs and manifest.json), and the runtime
// side of that contract (hostloop.go: caches, masks, rope inputs, feeds),
// which ONNX Runtime (ortrun), verify and the QNN bundle's capture share.
//
// It needs no cgo. onnxgraph never imports qnn: the QNN lint and bundle
// read the graphs this package writes, not the other way round.
package onnxgraph
