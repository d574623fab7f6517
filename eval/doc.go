// Package eval measures how closely a build follows the model it was made
// from, as llama.cpp's llama-perplexity --kl-divergence does
// (docs/eval.md): held-out text (the one built into the binary, samples,
// or token ids) cut into windows (Text, Scored), the base's
// log-probabilities written once and read back for every build (WriteBase,
// OpenBase, EnsureBase), and per scored token the KL divergence, same
// top-1, the true token's probability and perplexity (Score, Summarize),
// plus a greedy test: the base's continuations of the prompts (Generate)
// and how much of each the build reproduces (Evaluate). A build is any
// Model: the reference forward over a checkpoint or a format reader
// (Forward), or an ONNX export (package evalort). WriteReport renders the
// figures as one self-contained HTML page.
//
// eval needs no cgo; evalort, which runs exports in ONNX Runtime, does.
package eval
