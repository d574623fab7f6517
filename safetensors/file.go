package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"sparkconv/dtype"
	"sparkconv/infile"
)

// File is one memory-mapped safetensors file. Tensor data is read from the
// mapping on demand, so opening a multi-GB shard costs almost no memory.
// The file stays open while mapped: Stamp tells whether it was written to
// since, and Raw refuses to hand out a mapping of a file that shrank.
type File struct {
	Path   string
	Header *Header
	data   []byte // the whole mapping
	f      *os.File
	stamp  infile.Stamp
}

// OpenFile maps path read-only and validates its header. Only a regular
// file is opened (a symlink is followed), never blocking on a FIFO.
func OpenFile(path string) (*File, error) {
	f, st, err := infile.Open(path)
	if err != nil {
		return nil, err
	}
	h, err := ReadHeader(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf := &File{Path: path, Header: h, f: f, stamp: infile.StampOf(path, st)}
	if st.Size() > 0 {
		sf.data, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: mmap: %w", path, err)
		}
		register(sf)
	}
	return sf, nil
}

// Close unmaps the file. Slices returned by Raw are invalid afterwards.
func (f *File) Close() error {
	var err error
	if f.data != nil {
		unregister(f)
		err = unix.Munmap(f.data)
		f.data = nil
	}
	if f.f != nil {
		err = errors.Join(err, f.f.Close())
		f.f = nil
	}
	return err
}

// Unchanged reports an error naming the file when it was written to,
// truncated or extended since it was opened.
func (f *File) Unchanged() error {
	if f.f == nil {
		return nil
	}
	return f.stamp.CheckOpen(f.f)
}

// Stamp is what the file was when it was opened.
func (f *File) Stamp() infile.Stamp { return f.stamp }

// Raw returns the named tensor's bytes, a slice of the mapping (read-only).
// It first checks that the file did not shrink since it was mapped (reading
// past its new end would fault).
func (f *File) Raw(name string) (TensorInfo, []byte, error) {
	t, ok := f.Header.Tensor(name)
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	if f.f != nil {
		st, err := f.f.Stat()
		if err != nil {
			return t, nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		if st.Size() < f.stamp.Size {
			return t, nil, fmt.Errorf("%s: %w (truncated from %d to %d bytes while sparkconv was reading it); nothing written, run again",
				f.Path, infile.ErrChanged, f.stamp.Size, st.Size())
		}
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
	if err := Guard(func() error { return toFloat32Parallel(out, raw, t.DType) }); err != nil {
		return t, nil, fmt.Errorf("%s: tensor %q: %w", f.Path, name, err)
	}
	return t, out, nil
}

// CheckFinite reports the first NaN or Inf in a float tensor, naming it.
// 16-bit types are scanned four values per 64-bit word on every core.
func CheckFinite(t TensorInfo, raw []byte) error { return checkFinite(t, raw, nil) }

// checkFinite is CheckFinite; release, if set, is called with the byte
// range [lo, hi) of raw of each 16-bit chunk once it is scanned.
func checkFinite(t TensorInfo, raw []byte, release func(lo, hi int)) error {
	n := int(t.NumElements())
	switch t.DType {
	case dtype.BF16, dtype.F16:
		exp := uint16(0x7f80)
		if t.DType == dtype.F16 {
			exp = 0x7c00
		}
		i, err := firstAllOnes16(raw[:2*n], exp, release)
		if err != nil {
			return err
		}
		if i >= 0 {
			v := binary.LittleEndian.Uint16(raw[2*i:])
			return nonFinite(t, i, v&^0x8000 == exp)
		}
	case dtype.F32:
		return Guard(func() error {
			for i := range n {
				f := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
				if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
					return nonFinite(t, i, !math.IsNaN(float64(f)))
				}
			}
			return nil
		})
	}
	return nil
}

// firstAllOnes16 returns the index of the first 16-bit little-endian value
// whose bits under exp are all set (NaN or Inf), or -1. release, if set,
// gets each chunk's byte range once it is scanned.
func firstAllOnes16(raw []byte, exp uint16, release func(lo, hi int)) (int, error) {
	const chunk = 1 << 22 // bytes per task, a multiple of 8
	tasks := (len(raw) + chunk - 1) / chunk
	found := make([]int, tasks)
	var next atomic.Int64
	var fault atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), tasks) {
		wg.Go(func() {
			if err := Guard(func() error {
				for c := int(next.Add(1) - 1); c < tasks; c = int(next.Add(1) - 1) {
					lo, hi := c*chunk, min((c+1)*chunk, len(raw))
					found[c] = scanAllOnes16(raw[lo:hi], exp)
					if found[c] >= 0 {
						found[c] += lo / 2
					}
					if release != nil {
						release(lo, hi)
					}
				}
				return nil
			}); err != nil {
				fault.Store(&err)
			}
		})
	}
	wg.Wait()
	if e := fault.Load(); e != nil {
		return -1, *e
	}
	for _, i := range found {
		if i >= 0 {
			return i, nil
		}
	}
	return -1, nil
}

func scanAllOnes16(raw []byte, exp uint16) int {
	mask := uint64(exp) * 0x0001000100010001
	i := 0
	for ; i+8 <= len(raw); i += 8 {
		y := binary.LittleEndian.Uint64(raw[i:])&mask ^ mask // a lane is 0 where all exp bits are set
		if (y-0x0001000100010001)&^y&0x8000800080008000 != 0 {
			break
		}
	}
	for ; i+2 <= len(raw); i += 2 {
		if binary.LittleEndian.Uint16(raw[i:])&exp == exp {
			return i / 2
		}
	}
	return -1
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

// CheckFinite is the package's CheckFinite of the named tensor, scanned
// from the mapping with each chunk's pages dropped from the resident set
// as soon as the chunk is scanned (they stay in the page cache): scanning
// a 512 MB embedding does not make it resident. Reading the tensor later
// maps its pages again.
func (f *File) CheckFinite(name string) error {
	t, raw, err := f.Raw(name)
	if err != nil {
		return err
	}
	base := f.Header.DataStart() + t.Begin
	return checkFinite(t, raw, func(lo, hi int) { f.dropPages(base+int64(lo), base+int64(hi)) })
}

// dropPages drops the pages of the file's byte range [off, end) from the
// resident set, the partial pages at its ends included (as Release does:
// whoever reads a neighbour's bytes there maps them again from the page
// cache; and the kernel keeps a huge-page mapping that a range covers only
// in part).
func (f *File) dropPages(off, end int64) {
	page := int64(os.Getpagesize())
	lo, hi := off/page*page, min((end+page-1)/page*page, int64(len(f.data)))
	if f.data != nil && hi > lo {
		_ = unix.Madvise(f.data[lo:hi], unix.MADV_DONTNEED)
	}
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

// toFloat32Parallel decodes raw into dst on every core, in chunks of 1M
// values.
func toFloat32Parallel(dst []float32, raw []byte, d dtype.DType) error {
	const chunk = 1 << 20
	es := d.Size()
	if es == 0 || len(dst) <= chunk {
		return dtype.ToFloat32(dst, raw, d)
	}
	tasks := (len(dst) + chunk - 1) / chunk
	errs := make([]error, tasks)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), tasks) {
		wg.Go(func() {
			for c := int(next.Add(1) - 1); c < tasks; c = int(next.Add(1) - 1) {
				lo, hi := c*chunk, min((c+1)*chunk, len(dst))
				errs[c] = Guard(func() error { return dtype.ToFloat32(dst[lo:hi], raw[lo*es:hi*es], d) })
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
