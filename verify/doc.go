// Package verify runs ONNX graphs in ONNX Runtime (ortrun) against the
// float32 reference:
//
//   - Run checks an export-onnx folder (or the folders of a --layers
//     matrix, Union) against the reference forward, graph by graph over a
//     token history long enough to wrap every sliding window, after
//     CheckFiles has matched every file with the manifest; it reports per
//     graph SNR and the head's top-k agreement against fixed bars
//     (docs/formats.md#verify);
//   - Simulate runs one QDQ graph of a QNN bundle on its held-out samples
//     at optimization level SimOptimize (fake quantization) and reports the
//     SNR of its output, of the residual delta, and the head's top-1
//     agreement, the figures qnn-bundle's 20 dB bar is checked on
//     (docs/qnn.md#simulation-and-the-20-db-bar).
package verify
