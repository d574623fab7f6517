// Package ortrun runs ONNX graphs in ONNX Runtime, through cgo
// (yalue/onnxruntime_go): find and load the library once (FindORTLib,
// Init), open a graph from a file or bytes (OpenSession, NewSession) and
// Run it with named inputs to get named outputs (onnxgraph.Tensor values),
// and Runner, a decode-step runtime for a whole export folder written from
// the contract alone (manifest, caches, masks, rope inputs; onnxgraph's
// host loop). It is the only package of sparkconv that needs cgo: the
// builder, the export, the QNN lint and the bundle build without it.
package ortrun
