// Package qnnbundle builds the calibrated QNN bundle of an ONNX export
// (docs/qnn.md#the-bundle), the input AI Hub quantizes for a phone NPU:
// Run reads the calibration text (calib), traces it through the reference
// forward in decode mode exactly as a runtime feeds each graph (NewTrace,
// onnxgraph's host loop), observes the ranges each graph's tensors take
// when onnxeval runs it position by position, and writes per graph the
// float graph with its AIMET encodings (qnn's plan and file), the npz
// calibration inputs (WriteNPZ) and the QDQ simulation graph (QDQModel).
// Each QDQ graph then runs in ONNX Runtime on the held-out text, each
// sample a sequence of its own (ReadHeldOut, Simulate); a bundle with a
// layer whose worst held-out sequence simulates below BarDB is refused
// (ErrRefused, Bundle.Refusal) unless forced. An export's prefill graphs are bundled the
// same way on whole chunks at prefill positions, their encodings tied to
// their decode graphs' (prefill.go).
package qnnbundle
