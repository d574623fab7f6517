package qnn

import (
	"bytes"
	"testing"

	"sparkconv/onnxio"
	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

// FuzzLintSanitize unmarshals arbitrary bytes as a ModelProto and runs
// Lint, EncodeModel and Sanitize on it: none may panic, EncodeModel must
// equal deterministic Marshal, and a successful Sanitize must be
// idempotent (a second pass changes nothing).
func FuzzLintSanitize(f *testing.F) {
	for _, b := range []*tb{dynamoModel(), cleanLayer(), guardModel(0, true)(), rmsVariant("reciprocal")(),
		rmsVariant("powhalf")(), geluVariant(sqrt2, false, true, true, false, false)(), geluVariant(sqrt2, false, false, false, true, false)(),
		weightGraph(tF32, []int64{1 << 40, 1 << 40})(), weightGraph(onnxpb.TensorProto_INT4, []int64{-1, 3}, []int64{1 << 62})()} {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(b.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{0x3a, 0x02, 0x0a, 0x00}) // graph { node {} }
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &onnxpb.ModelProto{}
		if proto.Unmarshal(data, m) != nil {
			return
		}
		_ = Lint(m)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if _, err := onnxio.Encode(&buf, onnxio.Model{Proto: m}); err != nil || !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("EncodeModel differs from Marshal (err %v)", err)
		}
		if _, err := Sanitize(m); err != nil {
			return
		}
		_ = Lint(m)
		again, err := Sanitize(m)
		if err != nil || len(again) != 0 {
			t.Fatalf("second Sanitize: changes %v, err %v", again, err)
		}
	})
}
