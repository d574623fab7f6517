package onnxgraph

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"unsafe"

	"sparkconv/dtype"
	"sparkconv/kernels"
	"sparkconv/onnxio"
)

// Data is an initializer's little-endian bytes, produced when the file is
// written, so a multi-GB weight is converted chunk by chunk and never held
// twice (onnxio streams it).
type Data = onnxio.Data

// Bytes is Data already in memory.
type Bytes = onnxio.Bytes

// chunkElems is how many elements a converting source handles at a time.
const chunkElems = 1 << 18

// floatData encodes float32 values as float32 or float16 on the fly.
type floatData struct {
	v  []float32
	dt DType
}

// FloatData returns v encoded as dt (Float32 or Float16, round to nearest
// even).
func FloatData(v []float32, dt DType) Data {
	if dt != Float32 && dt != Float16 {
		panic(fmt.Sprintf("onnxgraph: FloatData to %s", dt))
	}
	return floatData{v, dt}
}

func (f floatData) Size() int64 { return int64(len(f.v)) * int64(f.dt.Size()) }

func (f floatData) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, min(len(f.v), chunkElems)*f.dt.Size())
	var total int64
	for start := 0; start < len(f.v); start += chunkElems {
		part := f.v[start:min(start+chunkElems, len(f.v))]
		b := encodeFloats(buf, part, f.dt)
		n, err := w.Write(b)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// encodeFloats writes v as dt into buf (which must be large enough).
func encodeFloats(buf []byte, v []float32, dt DType) []byte {
	if dt == Float16 {
		for i, x := range v {
			binary.LittleEndian.PutUint16(buf[2*i:], dtype.F32ToF16(x))
		}
		return buf[:2*len(v)]
	}
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	return buf[:4*len(v)]
}

// Int64Data returns v as little-endian int64 bytes.
func Int64Data(v []int64) Data {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return Bytes(b)
}

// rawConvert converts a checkpoint tensor (BF16, F16 or F32 bytes) to a
// float ONNX type, optionally transposing a [rows, cols] matrix to
// [cols, rows] (checkpoint linears are [out, in]; MatMul wants [in, out]).
type rawConvert struct {
	raw        []byte
	src        dtype.DType
	dt         DType
	rows, cols int
	transpose  bool
}

// ConvertRaw returns checkpoint bytes raw of type src as dt, unchanged in
// layout.
func ConvertRaw(raw []byte, src dtype.DType, dt DType) (Data, error) {
	if !src.IsFloat() {
		return nil, fmt.Errorf("tensor type %s is not a float type", src)
	}
	n := len(raw) / src.Size()
	return &rawConvert{raw: raw, src: src, dt: dt, rows: 1, cols: n}, nil
}

// TransposeRaw returns the [rows, cols] matrix raw of type src as dt,
// transposed to [cols, rows].
func TransposeRaw(raw []byte, src dtype.DType, dt DType, rows, cols int) (Data, error) {
	if !src.IsFloat() {
		return nil, fmt.Errorf("tensor type %s is not a float type", src)
	}
	if len(raw) != rows*cols*src.Size() {
		return nil, fmt.Errorf("matrix [%d, %d] of %s needs %d bytes, have %d", rows, cols, src, rows*cols*src.Size(), len(raw))
	}
	return &rawConvert{raw: raw, src: src, dt: dt, rows: rows, cols: cols, transpose: true}, nil
}

func (r *rawConvert) Size() int64 { return int64(r.rows) * int64(r.cols) * int64(r.dt.Size()) }

func (r *rawConvert) WriteTo(w io.Writer) (int64, error) {
	if r.src == dtype.BF16 && r.dt == Float16 && fastF16 {
		return r.writeBF16ToF16(w)
	}
	if r.transpose {
		return r.writeTransposed(w)
	}
	n := r.rows * r.cols
	f := make([]float32, min(n, chunkElems))
	buf := make([]byte, len(f)*r.dt.Size())
	var total int64
	es := r.src.Size()
	for start := 0; start < n; start += chunkElems {
		end := min(start+chunkElems, n)
		part := f[:end-start]
		if err := dtype.ToFloat32(part, r.raw[start*es:end*es], r.src); err != nil {
			return total, err
		}
		m, err := w.Write(encodeFloats(buf, part, r.dt))
		total += int64(m)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// fastF16 enables the direct bf16 -> fp16 path on little-endian hosts,
// where uint16s are their own little-endian bytes (tests turn it off to
// compare with the portable path).
var fastF16 = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// writeBF16ToF16 is WriteTo for bf16 -> fp16, without a float32 copy: 8x8
// tiles converted and transposed in registers (SIMD where the CPU allows;
// the same bits as the portable path either way), in bands of 64 output
// rows so that every source row is read in short contiguous runs.
func (r *rawConvert) writeBF16ToF16(w io.Writer) (int64, error) {
	src := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(r.raw))), len(r.raw)/2)
	if !r.transpose {
		out := make([]uint16, min(len(src), chunkElems))
		var total int64
		for start := 0; start < len(src); start += chunkElems {
			part := src[start:min(start+chunkElems, len(src))]
			o := out[:len(part)]
			done := kernels.BF16ToF16(o, part)
			for i, b := range part[done:] {
				o[done+i] = dtype.F32ToF16(dtype.BF16ToF32(b))
			}
			m, err := w.Write(u16Bytes(o))
			total += int64(m)
			if err != nil {
				return total, err
			}
		}
		return total, nil
	}
	const band = 64
	rows, cols := r.rows, r.cols
	out := make([]uint16, band*rows)
	var total int64
	for c0 := 0; c0 < cols; c0 += band {
		nb := min(band, cols-c0)
		tiled := 0 // rows [0, tiled) done by the 8x8 tiles
		if nb == band {
		tiles:
			for ; tiled+8 <= rows; tiled += 8 {
				for c := 0; c < band; c += 8 {
					if !kernels.BF16ToF16T8x8(out[c*rows+tiled:], rows, src[tiled*cols+c0+c:], cols) {
						tiled = 0 // no SIMD kernel: nothing was written
						break tiles
					}
				}
			}
		}
		for row := tiled; row < rows; row++ {
			for j, b := range src[row*cols+c0 : row*cols+c0+nb] {
				out[j*rows+row] = dtype.F32ToF16(dtype.BF16ToF32(b))
			}
		}
		m, err := w.Write(u16Bytes(out[:nb*rows]))
		total += int64(m)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// u16Bytes views little-endian uint16s (amd64, arm64) as bytes.
func u16Bytes(v []uint16) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 2*len(v))
}

// writeTransposed emits output rows (source columns) in bands of 64: each
// band reads one short contiguous run from every source row, so the whole
// source is read about once.
func (r *rawConvert) writeTransposed(w io.Writer) (int64, error) {
	const band = 64
	es := r.src.Size()
	tmp := make([]float32, band)
	out := make([]float32, band*r.rows)
	buf := make([]byte, len(out)*r.dt.Size())
	var total int64
	for c0 := 0; c0 < r.cols; c0 += band {
		nb := min(band, r.cols-c0)
		for row := range r.rows {
			off := (row*r.cols + c0) * es
			if err := dtype.ToFloat32(tmp[:nb], r.raw[off:off+nb*es], r.src); err != nil {
				return total, err
			}
			for j := range nb {
				out[j*r.rows+row] = tmp[j]
			}
		}
		m, err := w.Write(encodeFloats(buf, out[:nb*r.rows], r.dt))
		total += int64(m)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
