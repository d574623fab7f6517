// Package verify runs an export's ONNX graphs in ONNX Runtime (ortrun)
// against the float32 reference: Run checks an export-onnx folder (or the
// folders of a --layers matrix, Union) against the reference forward, graph
// by graph over a token history long enough to wrap every sliding window,
// after CheckFiles has matched every file with the manifest; it reports per
// graph SNR and the head's top-k agreement against fixed bars
// (docs/formats.md#verify). Run does it from a checkpoint folder,
// loading ONNX Runtime first.
package verify
