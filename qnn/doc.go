// Package qnn owns what sparkconv knows about Qualcomm QNN HTP as a consumer
// of ONNX graphs (shared/spec/qnn.md sections 3 and 5): a lint that reports
// every construct the QAIRT converter or ORT's QNN execution provider rejects
// or handles badly (Lint, with the rule table Rules and the supported-op
// table Ops), and a sanitizer that rewrites the three constructs PyTorch's
// dynamo exporter emits and QNN refuses -- Where(IsNaN(x), 0, x) guards,
// Reshape allowzero=1, rank-0 axes -- without changing what the graph
// computes (Sanitize). Files are read and written through onnxio.
//
// qnn reads graphs (onnxpb, and onnxgraph's in tests); onnxgraph never
// imports qnn. It builds and tests without cgo.
package qnn
