package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/dtype"
	"sparkconv/outdir"
)

// file builds safetensors bytes from a header text and a data section.
func file(header string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func writeTemp(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCorruptFiles(t *testing.T) {
	eight := make([]byte, 8)
	lying := file(`{}`, nil)
	binary.LittleEndian.PutUint64(lying, 1000) // header claims 1000 bytes
	huge := make([]byte, 8)
	binary.LittleEndian.PutUint64(huge, 200<<20)
	nan := make([]byte, 4)
	binary.LittleEndian.PutUint16(nan[2:], 0x7fc0)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"truncated length", []byte{1, 2, 3}, "too short"},
		{"header lies about its length", lying, "runs past the end"},
		{"header over 100 MB", huge, "exceeds the 100 MB limit"},
		{"not JSON", file(`{"a":`, nil), "header JSON"},
		{"not an object", file(`[1,2]`, nil), "not a JSON object"},
		{"unknown dtype", file(`{"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}`, make([]byte, 2)), `tensor "w": unknown dtype`},
		{"offsets outside", file(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 4)), `tensor "w": data_offsets [0, 8] outside the data section of 4 bytes`},
		{"length mismatch", file(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, eight), `tensor "w": F32[3] needs 12 bytes, data_offsets span 8`},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "overlaps"},
		{"hole", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "hole of 4 bytes"},
		{"trailing bytes", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, eight), "data section is 8 bytes but tensors cover 4"},
		{"duplicate tensor", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), `tensor "a" appears twice`},
		{"negative shape", file(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, eight[:4]), "negative dimension"},
		{"bad offsets arity", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, eight[:4]), "data_offsets must hold 2"},
		{"metadata not strings", file(`{"__metadata__":{"a":1}}`, nil), "__metadata__ must map strings"},
	}
	dir := t.TempDir()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeTemp(t, dir, strings.Repeat("x", i+1)+".safetensors", tc.data)
			_, err := OpenFile(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %v; want it to name the file and say %q", err, tc.want)
			}
		})
	}
	// NaN is found by name.
	p := writeTemp(t, dir, "nan.safetensors", file(`{"w.bad":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}`, nan))
	f, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, raw, _ := f.Raw("w.bad")
	if err := CheckFinite(ti, raw); err == nil || !strings.Contains(err.Error(), `tensor "w.bad" holds NaN at flat index 1`) {
		t.Errorf("CheckFinite: %v", err)
	}
	inf := []byte{0, 0, 0x80, 0xff} // F32 -Inf
	ti = TensorInfo{Name: "x", DType: dtype.F32, Shape: []int64{1}}
	if err := CheckFinite(ti, inf); err == nil || !strings.Contains(err.Error(), "Inf") {
		t.Errorf("CheckFinite(-Inf): %v", err)
	}
}

// roundTrip writes tensors with WriteCheckpoint and reopens the folder.
func roundTrip(t *testing.T, opt WriteOptions) (*Checkpoint, []string) {
	t.Helper()
	dir := t.TempDir()
	var tensors []Tensor
	for i, name := range []string{"b.weight", "a.weight", "c.bias", "d.scale"} {
		data, _ := dtype.FromFloat32([]float32{float32(i), float32(i) + 0.5, -1, 2}, dtype.BF16)
		tensors = append(tensors, Tensor{Name: name, DType: dtype.BF16, Shape: []int64{2, 2}, Produce: func() ([]byte, error) { return data, nil }})
	}
	tensors = append(tensors, Tensor{Name: "q.int", DType: dtype.I32, Shape: []int64{1}, Produce: func() ([]byte, error) { return []byte{0x77, 0x77, 0x77, 0x77}, nil }})
	files, err := WriteCheckpoint(dir, tensors, opt)
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, files
}

func TestWriteAndReopen(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opt   WriteOptions
		files int
	}{
		{"single", WriteOptions{Metadata: map[string]string{"format": "pt"}}, 1},
		{"max shard size", WriteOptions{MaxShardSize: 10}, 6}, // 8+8 > 10: one tensor per shard (5), plus the index
		{"three shards", WriteOptions{Shards: 3}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, files := roundTrip(t, tc.opt)
			if len(files) != tc.files {
				t.Errorf("files %v", files)
			}
			if got := c.Names(); strings.Join(got, ",") != "a.weight,b.weight,c.bias,d.scale,q.int" {
				t.Errorf("names %v", got)
			}
			_, v, err := c.Float32("d.scale")
			if err != nil || v[0] != 3 || v[1] != 3.5 || v[3] != 2 {
				t.Errorf("d.scale = %v, %v", v, err)
			}
			_, raw, _ := c.Raw("q.int")
			if binary.LittleEndian.Uint32(raw) != 0x77777777 {
				t.Errorf("q.int = %x", raw)
			}
		})
	}
}

func TestIndexRules(t *testing.T) {
	dir := t.TempDir()
	good := file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4))
	writeTemp(t, dir, "model-00001-of-00001.safetensors", good)
	tests := []struct {
		name, index, want string
	}{
		{"dotdot", `{"weight_map":{"a":"../model.safetensors"}}`, "not a plain file name"},
		{"absolute", `{"weight_map":{"a":"/etc/passwd"}}`, "absolute path"},
		{"subdir", `{"weight_map":{"a":"sub/x.safetensors"}}`, "not a plain file name"},
		{"missing shard", `{"weight_map":{"a":"nope.safetensors"}}`, `shard "nope.safetensors"`},
		{"tensor not in shard", `{"weight_map":{"a":"model-00001-of-00001.safetensors","b":"model-00001-of-00001.safetensors"}}`, `tensor "b" is indexed in model-00001-of-00001.safetensors but not found there`},
		{"no weight_map", `{"metadata":{}}`, "missing weight_map"},
		{"bad json", `{"weight_map":`, "invalid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(tc.index), 0o644)
			_, err := OpenDir(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), IndexFile) {
				t.Fatalf("error %v, want it to name the index and say %q", err, tc.want)
			}
		})
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), int64(4))
	f.Add([]byte(`{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`), int64(8))
	f.Add([]byte(`{"a":{"dtype":"I8","shape":[],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}}`), int64(1))
	f.Fuzz(func(t *testing.T, header []byte, dataSize int64) {
		h, err := ParseHeader(header, dataSize)
		if err != nil {
			return
		}
		var pos int64
		for _, ti := range h.Tensors {
			if ti.Begin != pos || ti.End-ti.Begin != ti.NumElements()*int64(ti.DType.Size()) {
				t.Fatalf("accepted bad layout: %+v", ti)
			}
			pos = ti.End
		}
		if pos != dataSize {
			t.Fatalf("accepted coverage %d of %d", pos, dataSize)
		}
	})
}

func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../x"}}`))
	f.Add([]byte(`{"weight_map":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := ParseIndex(data, "index.json")
		if err != nil {
			return
		}
		for _, shard := range idx.WeightMap {
			if strings.ContainsAny(shard, `/\`) || shard == ".." || shard == "" {
				t.Fatalf("accepted shard name %q", shard)
			}
		}
		if _, err := json.Marshal(idx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFirstAllOnes16 places one Inf or NaN at positions around word and
// task boundaries and checks the parallel SWAR scan finds exactly it.
func TestFirstAllOnes16(t *testing.T) {
	raw := make([]byte, (1<<22)*2+10)
	for i := 0; i+2 <= len(raw); i += 2 {
		binary.LittleEndian.PutUint16(raw[i:], uint16(0x3f00+i%0x7f)|uint16(i&1)<<15) // finite bf16
	}
	if got, _ := firstAllOnes16(raw, 0x7f80, nil); got != -1 {
		t.Fatalf("finite data: found %d", got)
	}
	for _, pos := range []int{0, 1, 3, 4, 7, 1<<21 - 1, 1 << 21, 1<<22 + 4} {
		for _, v := range []uint16{0x7f80, 0xff80, 0x7fc1} {
			old := binary.LittleEndian.Uint16(raw[2*pos:])
			binary.LittleEndian.PutUint16(raw[2*pos:], v)
			if got, _ := firstAllOnes16(raw, 0x7f80, nil); got != pos {
				t.Errorf("value %#04x at %d: found %d", v, pos, got)
			}
			binary.LittleEndian.PutUint16(raw[2*pos:], old)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.safetensors")
	one := []Tensor{{Name: "a", DType: dtype.F32, Shape: []int64{1}, Produce: func() ([]byte, error) { return []byte{0, 0, 128, 63}, nil }}}
	owner := MetadataOwner("producer", "test")
	meta := WriteOptions{Metadata: map[string]string{"producer": "test"}}
	write := func(ts []Tensor, force bool) error {
		out, err := outdir.NewFile(p, force, owner)
		if err != nil {
			return err
		}
		return WriteFile(out, ts, meta)
	}
	if err := write(one, false); err != nil {
		t.Fatal(err)
	}
	if err := write(one, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("second write without force: %v", err)
	}
	failing := []Tensor{{Name: "b", DType: dtype.F32, Shape: []int64{1}, Produce: func() ([]byte, error) { return nil, os.ErrInvalid }}}
	if err := write(failing, true); err == nil || !strings.Contains(err.Error(), `tensor "b"`) {
		t.Errorf("failing tensor: %v", err)
	}
	foreign := filepath.Join(dir, "foreign.safetensors")
	os.WriteFile(foreign, []byte("not safetensors"), 0o644)
	if _, err := outdir.NewFile(foreign, true, owner); err == nil || !strings.Contains(err.Error(), "not written by sparkconv") {
		t.Errorf("--force over a foreign file: %v", err)
	}
	os.Remove(foreign)
	f, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, v, err := f.Float32("a"); err != nil || v[0] != 1 {
		t.Errorf("the earlier file was damaged: %v %v", v, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}
