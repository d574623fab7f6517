package qnnbundle

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"sparkconv/onnxgraph"
)

// The calibration data file: NumPy's .npz (a zip of .npy arrays, NEP 1),
// one array per graph input named after it, the samples stacked on a new
// first axis: the {input name: [arrays]} that AI Hub's
// submit_quantize_job(calibration_data=...) and aimet's compute_encodings
// take (np.load(f)[name][i] is sample i). Floats are little-endian
// float32, int64 inputs are written as int32, as qai-hub-models'
// make_hub_dataset_entries does. Entries are stored uncompressed with a
// fixed timestamp, so the same samples give the same bytes.

// npzTime is the (DOS-epoch) modification time of every entry.
var npzTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// WriteNPZ writes the samples' inputs, in the order of names.
func WriteNPZ(w io.Writer, names []string, samples []Sample) error {
	zw := zip.NewWriter(w)
	for _, name := range names {
		if err := writeNPY(zw, name, samples); err != nil {
			return err
		}
	}
	return zw.Close()
}

func writeNPY(zw *zip.Writer, name string, samples []Sample) error {
	if len(samples) == 0 {
		return fmt.Errorf("input %s: no samples", name)
	}
	first, ok := samples[0].Feeds[name]
	if !ok {
		return fmt.Errorf("input %s: not captured", name)
	}
	descr := "<f4"
	if first.DType == onnxgraph.Int64 {
		descr = "<i4"
	} else if first.DType != onnxgraph.Float32 {
		return fmt.Errorf("input %s: %s inputs are not written (float32, int64)", name, first.DType)
	}
	shape := []string{fmt.Sprint(len(samples))}
	for _, d := range first.Shape {
		shape = append(shape, fmt.Sprint(d))
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, strings.Join(shape, ", "))
	// magic (6) + version (2) + header length (2) + header + padding + \n is
	// a multiple of 64 (NEP 1 alignment).
	pad := 64 - (10+len(hdr)+1)%64
	if pad == 64 {
		pad = 0
	}
	hdr += strings.Repeat(" ", pad) + "\n"
	f, err := zw.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: zip.Store, Modified: npzTime})
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	bw.WriteString("\x93NUMPY\x01\x00")
	binary.Write(bw, binary.LittleEndian, uint16(len(hdr)))
	bw.WriteString(hdr)
	var buf [4]byte
	for _, s := range samples {
		t := s.Feeds[name]
		if t.DType != first.DType || fmt.Sprint(t.Shape) != fmt.Sprint(first.Shape) {
			return fmt.Errorf("input %s: sample at position %d is %s %v, the first %s %v", name, s.Pos, t.DType, t.Shape, first.DType, first.Shape)
		}
		if t.DType == onnxgraph.Int64 {
			for _, v := range t.I64 {
				if v < math.MinInt32 || v > math.MaxInt32 {
					return fmt.Errorf("input %s: value %d does not fit int32", name, v)
				}
				binary.LittleEndian.PutUint32(buf[:], uint32(int32(v)))
				bw.Write(buf[:])
			}
			continue
		}
		for _, v := range t.F32 {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			bw.Write(buf[:])
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("input %s: %w", name, err)
	}
	return nil
}
