package onnxgraph

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"sparkconv/spark"
)

// FingerprintMethod names how SourceFingerprint is computed; a manifest
// records it beside the value so a later sparkconv can tell whether it can
// recompute it.
const FingerprintMethod = "sha256(config.json, every tensor's name, dtype and shape, 3 x 256 bytes sampled from its data) v1"

// fingerprintSample is how many bytes are hashed at the start, the middle
// and the end of every tensor: enough to tell two checkpoints of the same
// shape apart (two random initializations, a fine-tune) without reading
// 3.4 GB.
const fingerprintSample = 256

// SourceFingerprint identifies the checkpoint an export is made from: the
// exact config.json bytes, every tensor's header (name, dtype, shape) and
// samples of its bytes. verify recomputes it from --model and refuses an
// export of another checkpoint by name instead of failing its bars.
func SourceFingerprint(m *spark.Model) (string, error) {
	h := sha256.New()
	var n [8]byte
	put := func(b []byte) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	put([]byte(FingerprintMethod))
	put(m.ConfigJSON)
	for _, name := range m.Names() {
		info, raw, err := m.Checkpoint.Raw(name)
		if err != nil {
			return "", fmt.Errorf("fingerprint: %w", err)
		}
		put([]byte(fmt.Sprintf("%s %s %v", name, info.DType, info.Shape)))
		k := min(fingerprintSample, len(raw))
		mid := max(0, len(raw)/2-k/2)
		put(raw[:k])
		put(raw[mid : mid+k])
		put(raw[len(raw)-k:])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
