// Package qnn owns what sparkconv knows about Qualcomm QNN HTP as a consumer
// of ONNX graphs (docs/qnn.md). It holds two products:
//
//   - the graph checks: a lint that reports every construct the QAIRT
//     converter or ORT's QNN execution provider rejects or handles badly
//     (Lint, with the rule table Rules and the supported-op table Ops), the
//     lint of a graph with its AIMET encodings (LintEncodings), and a
//     sanitizer that rewrites the three constructs PyTorch's dynamo exporter
//     emits and QNN refuses -- Where(IsNaN(x), 0, x) guards, Reshape
//     allowzero=1, rank-0 axes -- without changing what the graph computes
//     (Sanitize);
//   - the calibrated bundle of an export (docs/qnn.md#the-bundle): a Trace
//     of the reference forward over calibration text (NewTrace), the ranges
//     each graph's tensors take when onnxeval runs it position by position,
//     the AIMET 1.0.0 encodings with their ties (KV inputs to their outputs,
//     Concat, the fused RMSNorm and GELU patterns left free), the npz
//     calibration inputs (WriteNPZ), and the QDQ simulation graphs
//     (QDQModel) whose SNR decides the bundle (BundleGraph, Bundle).
//
// Files are read and written through onnxio. qnn reads graphs (onnxpb, and
// onnxgraph's manifest and export); onnxgraph never imports qnn. It builds
// and tests without cgo.
package qnn
