package onnxgraph_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"sparkconv/dtype"
	. "sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"
	"sparkconv/ortrun"
	"sparkconv/ortrun/orttest"

	"google.golang.org/protobuf/proto"
)

// smallModel: y = MatMul(x, W) + b, z = Softmax(y) with x [1,2,3].
func smallModel(dt DType) *Builder {
	b := New("small", dt)
	x := b.Input("x", dt, 1, 2, 3)
	w := b.Float32s("W", []int64{3, 4}, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	bias := b.Float32s("bias", []int64{4}, []float32{0.5, -0.5, 0.25, -0.25})
	y := b.Op("MatMul", []string{x, w})
	b.OpTo("y", "Add", []string{y, bias})
	b.OpTo("z", "Softmax", []string{"y"}, AttrInt("axis", -1))
	b.Output("y", dt, 1, 2, 4)
	b.Output("z", dt, 1, 2, 4)
	return b
}

func TestEncodeEqualsDeterministicMarshal(t *testing.T) {
	for _, dt := range []DType{Float32, Float16} {
		b := smallModel(dt)
		b.Meta("k", "v")
		got, err := b.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		m := &onnxpb.ModelProto{}
		if err := proto.Unmarshal(got, m); err != nil {
			t.Fatal(err)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: streamed bytes differ from proto.Marshal (%d vs %d bytes)", dt, len(got), len(want))
		}
		if m.GetIrVersion() != 8 || len(m.OpsetImport) != 1 || m.OpsetImport[0].GetVersion() != 17 || m.OpsetImport[0].GetDomain() != "" {
			t.Fatalf("ir %d opset %v", m.GetIrVersion(), m.OpsetImport)
		}
		w := m.Graph.Initializer[0]
		if w.GetName() != "W" || w.GetDataType() != int32(dt) || len(w.RawData) != 12*dt.Size() {
			t.Fatalf("initializer W: %v", w)
		}
		// Raw data is little-endian: element 2 of W is 3.0.
		var third float32
		if dt == Float32 {
			third = math.Float32frombits(binary.LittleEndian.Uint32(w.RawData[8:]))
		} else {
			third = dtype.F16ToF32(binary.LittleEndian.Uint16(w.RawData[4:]))
		}
		if third != 3 {
			t.Fatalf("W[2] = %v", third)
		}
		b2 := smallModel(dt)
		b2.Meta("k", "v")
		again, _ := b2.Marshal()
		if !bytes.Equal(got, again) {
			t.Fatal("same calls gave different bytes")
		}
	}
}

func TestUniqueNamesAndConstSharing(t *testing.T) {
	b := New("g", Float32)
	x := b.Input("x", Float32, 1, 4)
	c1 := b.Scalar(2)
	c2 := b.Scalar(2)
	c3 := b.Scalar(3)
	a1 := b.Int64s(-1)
	a2 := b.Int64s(-1)
	if c1 != c2 || c1 == c3 || a1 != a2 {
		t.Fatalf("const sharing: %s %s %s %s %s", c1, c2, c3, a1, a2)
	}
	y1 := b.Op("Mul", []string{x, c1})
	y2 := b.Op("Mul", []string{y1, c3})
	if y1 == y2 {
		t.Fatal("two ops got one name")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("reusing a value name did not panic")
		}
	}()
	b.Input("x", Float32, 1)
}

func runSmall(t *testing.T, dt DType) map[string]Tensor {
	t.Helper()
	data, err := smallModel(dt).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ortrun.NewSession(data, ortrun.SessionOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := []float32{1, 0, -1, 0.5, 0.25, 2}
	out, err := s.Run(map[string]Tensor{"x": FloatTensor(dt, []int64{1, 2, 3}, x)})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRunInORT(t *testing.T) {
	orttest.Init(t)
	// x @ W + b computed by hand.
	want := []float32{1 - 9 + 0.5, 2 - 10 - 0.5, 3 - 11 + 0.25, 4 - 12 - 0.25,
		0.5 + 1.25 + 18 + 0.5, 1 + 1.5 + 20 - 0.5, 1.5 + 1.75 + 22 + 0.25, 2 + 2 + 24 - 0.25}
	for _, dt := range []DType{Float32, Float16} {
		out := runSmall(t, dt)
		y := out["y"].Floats()
		for i := range want {
			if y[i] != want[i] { // every value is exact in fp16 too
				t.Fatalf("%s: y[%d] = %v, want %v", dt, i, y[i], want[i])
			}
		}
		z := out["z"].Floats()
		for r := range 2 {
			var sum, mx float64
			for _, v := range want[4*r : 4*r+4] {
				mx = math.Max(mx, float64(v))
			}
			for _, v := range want[4*r : 4*r+4] {
				sum += math.Exp(float64(v) - mx)
			}
			for j := range 4 {
				ref := math.Exp(float64(want[4*r+j])-mx) / sum
				tol := 1e-6
				if dt == Float16 {
					tol = 1e-3
				}
				if d := math.Abs(float64(z[4*r+j]) - ref); d > tol {
					t.Fatalf("%s: softmax[%d,%d] = %v, want %v", dt, r, j, z[4*r+j], ref)
				}
			}
		}
	}
}

func TestExternalData(t *testing.T) {
	orttest.Init(t)
	dir := t.TempDir()
	b := smallModel(Float32)
	big := make([]float32, 3000) // a 12000-byte weight that must move out
	for i := range big {
		big[i] = float32(i%7) - 3
	}
	x := "x2"
	b.Input(x, Float32, 1, 3000)
	bw := b.Float32s("big", []int64{3000, 1}, big)
	b.OpTo("dot", "MatMul", []string{x, bw})
	b.Output("dot", Float32, 1, 1)
	info, err := b.WriteFile(dir, "m.onnx", onnxio.WriteOptions{ExternalThreshold: 4096, MinExternal: 40})
	if err != nil {
		t.Fatal(err)
	}
	if info.External == nil || info.External.Name != "m.onnx.data" {
		t.Fatalf("no external data file: %+v", info)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "m.onnx"))
	if int64(len(raw)) != info.Size || info.Size > 4096 {
		t.Fatalf("model file %d bytes, info %d", len(raw), info.Size)
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(raw, m); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, in := range m.Graph.Initializer {
		if in.GetDataLocation() != onnxpb.TensorProto_EXTERNAL {
			if len(in.RawData) >= 40 {
				t.Errorf("%s (%d bytes) stayed inline", in.GetName(), len(in.RawData))
			}
			continue
		}
		moved++
		kv := map[string]string{}
		for _, e := range in.ExternalData {
			kv[e.GetKey()] = e.GetValue()
		}
		off, _ := strconv.ParseInt(kv["offset"], 10, 64)
		if kv["location"] != "m.onnx.data" || off%onnxio.ExternalAlign != 0 || in.RawData != nil {
			t.Errorf("%s: external %v", in.GetName(), kv)
		}
	}
	if moved != 2 { // W (48 B) and big (12000 B); bias (16 B) stays inline
		t.Errorf("moved %d initializers, want 2", moved)
	}
	s, err := ortrun.OpenSession(filepath.Join(dir, "m.onnx"), ortrun.SessionOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	xs := make([]float32, 3000)
	var ref float64
	for i := range xs {
		xs[i] = float32(i%5) * 0.5
		ref += float64(xs[i]) * float64(big[i])
	}
	out, err := s.Run(map[string]Tensor{
		"x":  F32Tensor([]int64{1, 2, 3}, []float32{1, 0, -1, 0.5, 0.25, 2}),
		"x2": F32Tensor([]int64{1, 3000}, xs),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := out["dot"].F32[0]; float64(got) != ref {
		t.Fatalf("dot = %v, want %v", got, ref)
	}
	if out["y"].F32[0] != -7.5 {
		t.Fatalf("y[0] = %v", out["y"].F32[0])
	}
	h, err := onnxio.HashFile(filepath.Join(dir, "m.onnx"))
	if err != nil || h.SHA256 != info.SHA256 {
		t.Fatalf("hash %v vs %v (%v)", h.SHA256, info.SHA256, err)
	}
}

func TestTransposeRaw(t *testing.T) {
	const rows, cols = 5, 70 // more than one 64-wide band
	for _, src := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F32} {
		vals := make([]float32, rows*cols)
		for i := range vals {
			vals[i] = dtype.Round(float32(i)*0.25-3, src)
		}
		raw, err := dtype.FromFloat32(vals, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, dt := range []DType{Float32, Float16} {
			d, err := TransposeRaw(raw, src, dt, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := d.WriteTo(&buf); err != nil || int64(buf.Len()) != d.Size() {
				t.Fatalf("wrote %d of %d: %v", buf.Len(), d.Size(), err)
			}
			for c := range cols {
				for r := range rows {
					i := c*rows + r
					var got float32
					if dt == Float32 {
						got = math.Float32frombits(binary.LittleEndian.Uint32(buf.Bytes()[4*i:]))
					} else {
						got = dtype.F16ToF32(binary.LittleEndian.Uint16(buf.Bytes()[2*i:]))
					}
					if want := dtype.Round(vals[r*cols+c], dtype.DType(map[DType]string{Float32: "F32", Float16: "F16"}[dt])); got != want {
						t.Fatalf("%s->%s [%d,%d] = %v want %v", src, dt, c, r, got, want)
					}
				}
			}
		}
	}
}
