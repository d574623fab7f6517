package safetensors

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"sparkconv/dtype"
)

// File is one memory-mapped safetensors file. Tensor data is read from the
// mapping on demand, so opening a multi-GB shard costs almost no memory.
type File struct {
	Path   string
	Header *Header
	data   []byte // the whole mapping
}

// OpenFile maps path read-only and validates its header.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	h, err := ReadHeader(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf := &File{Path: path, Header: h}
	if st.Size() > 0 {
		sf.data, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return nil, fmt.Errorf("%s: mmap: %w", path, err)
		}
	}
	return sf, nil
}

// Close unmaps the file. Slices returned by Raw are invalid afterwards.
func (f *File) Close() error {
	if f.data == nil {
		return nil
	}
	err := unix.Munmap(f.data)
	f.data = nil
	return err
}

// Raw returns the named tensor's bytes, a slice of the mapping (read-only).
func (f *File) Raw(name string) (TensorInfo, []byte, error) {
	t, ok := f.Header.Tensor(name)
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	start := f.Header.DataStart()
	return t, f.data[start+t.Begin : start+t.End : start+t.End], nil
}

// Float32 decodes the named float tensor (BF16, F16 or F32) into a new
// float32 slice.
func (f *File) Float32(name string) (TensorInfo, []float32, error) {
	t, raw, err := f.Raw(name)
	if err != nil {
		return t, nil, err
	}
	out := make([]float32, t.NumElements())
	if err := dtype.ToFloat32(out, raw, t.DType); err != nil {
		return t, nil, fmt.Errorf("%s: tensor %q: %w", f.Path, name, err)
	}
	return t, out, nil
}

// CheckFinite reports the first NaN or Inf in a float tensor, naming it.
func CheckFinite(t TensorInfo, raw []byte) error {
	n := int(t.NumElements())
	switch t.DType {
	case dtype.BF16, dtype.F16:
		expMask := uint16(0x7f80)
		if t.DType == dtype.F16 {
			expMask = 0x7c00
		}
		for i := range n {
			v := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
			if v&expMask == expMask {
				return nonFinite(t, i, v&^0x8000 == expMask)
			}
		}
	case dtype.F32:
		for i := range n {
			v := uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24
			f := math.Float32frombits(v)
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return nonFinite(t, i, !math.IsNaN(float64(f)))
			}
		}
	}
	return nil
}

func nonFinite(t TensorInfo, i int, inf bool) error {
	what := "NaN"
	if inf {
		what = "Inf"
	}
	return fmt.Errorf("tensor %q holds %s at flat index %d (%s)", t.Name, what, i, unravel(i, t.Shape))
}

func unravel(i int, shape []int64) string {
	idx := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = int64(i) % shape[d]
			i /= int(shape[d])
		}
	}
	return fmt.Sprint(idx)
}

// Release drops the tensor's pages from this process's resident set.
func (f *File) Release(name string) {
	t, ok := f.Header.Tensor(name)
	if !ok || f.data == nil {
		return
	}
	page := int64(os.Getpagesize())
	start := f.Header.DataStart() + t.Begin
	lo := start / page * page
	hi := f.Header.DataStart() + t.End
	if hi <= lo {
		return
	}
	_ = unix.Madvise(f.data[lo:hi], unix.MADV_DONTNEED)
}
