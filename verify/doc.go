// Package verify runs an export-onnx folder in ONNX Runtime (ortrun)
// against the float32 reference forward, graph by graph over a token
// history long enough to wrap every sliding window, and reports per graph
// SNR and the head's top-k agreement against fixed bars.
package verify
