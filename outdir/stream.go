package outdir

import (
	"errors"
	"hash"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Stream sizes: bytes are handed to the writing goroutine in chunks of
// streamChunk. Chunks go to the disk with O_DIRECT where the file system
// takes it: no copy into the page cache (on the VMs this was measured on,
// a buffered write cost 2.5 CPU-s per GB in the kernel, a direct one 0.2),
// and nothing left for the closing fsync but the metadata. Elsewhere the
// kernel is asked to start writing back every chunk as soon as it is
// written, and the writer waits for the chunk streamLag bytes behind to be
// on disk, so dirty pages stay bounded and the fsync finds little to do.
const (
	streamChunk  = 8 << 20
	streamChunks = 4 // chunk buffers in flight
	streamLag    = 64 << 20
	directAlign  = 4096 // O_DIRECT buffer, length and offset alignment
)

// Stream writes one new file through a buffer and flushes as it goes:
// write(2) and write-back run on a goroutine of their own, and the optional
// hash is computed on a third goroutine, so the caller only fills buffers.
// Close writes what is left, fsyncs the file and reports the first error.
// A Stream is not safe for concurrent use.
type Stream struct {
	f      *os.File
	h      hash.Hash
	cur    []byte
	n      int64
	free   chan []byte
	write  chan []byte
	hashq  chan []byte
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
	closed bool
	direct bool // O_DIRECT is set on f
}

// alignedChunk returns an empty buffer of capacity streamChunk whose start
// is directAlign-aligned.
func alignedChunk() []byte {
	b := make([]byte, streamChunk+directAlign)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (directAlign - 1))
	return b[off : off : off+streamChunk]
}

// NewStream returns a Stream writing f, a new empty file, from offset 0; h,
// if not nil, receives every byte written.
func NewStream(f *os.File, h hash.Hash) *Stream {
	return newStream(f, h, true)
}

func newStream(f *os.File, h hash.Hash, tryDirect bool) *Stream {
	s := &Stream{f: f, h: h, free: make(chan []byte, streamChunks), write: make(chan []byte, streamChunks)}
	for range streamChunks {
		s.free <- alignedChunk()
	}
	if tryDirect {
		s.direct = setDirect(f, true) == nil
	}
	if h != nil {
		s.hashq = make(chan []byte, streamChunks)
		s.wg.Add(1)
		go s.hasher()
	}
	s.wg.Add(1)
	go s.writer()
	s.cur = <-s.free
	return s
}

func (s *Stream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

func (s *Stream) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// writer writes chunks in order, starts their write-back and waits for the
// write-back streamLag behind; then hands each chunk to the hasher (or
// back to the free list).
func (s *Stream) writer() {
	defer s.wg.Done()
	if s.hashq != nil {
		defer close(s.hashq)
	}
	fd := int(s.f.Fd())
	var off, synced int64
	broken := false
	for c := range s.write {
		if !broken && s.direct {
			if err := s.writeDirect(c); err != nil {
				s.fail(err)
				broken = true
			}
			off += int64(len(c))
		} else if !broken {
			if _, err := s.f.Write(c); err != nil {
				s.fail(err)
				broken = true
			} else {
				// Advisory: a file system without sync_file_range is
				// still made durable by Close's fsync.
				startWriteBack(fd, off, int64(len(c)))
				off += int64(len(c))
				if behind := off - streamLag; behind > synced {
					waitWriteBack(fd, synced, behind-synced)
					synced = behind
				}
			}
		}
		if s.hashq != nil {
			s.hashq <- c
		} else {
			s.free <- c[:0]
		}
	}
}

// writeDirect writes c with O_DIRECT: all of it when its length is
// aligned (every chunk but the last), else the aligned part and then the
// rest with O_DIRECT cleared. A file system that refuses the direct write
// itself (EINVAL) gets it buffered, and so does the rest of the file.
func (s *Stream) writeDirect(c []byte) error {
	head := len(c) &^ (directAlign - 1)
	if head > 0 {
		_, err := s.f.Write(c[:head])
		if errors.Is(err, syscall.EINVAL) {
			if err := setDirect(s.f, false); err != nil {
				return err
			}
			s.direct = false
			_, err = s.f.Write(c)
			return err
		}
		if err != nil {
			return err
		}
	}
	if head == len(c) {
		return nil
	}
	if err := setDirect(s.f, false); err != nil {
		return err
	}
	s.direct = false
	_, err := s.f.Write(c[head:])
	return err
}

func (s *Stream) hasher() {
	defer s.wg.Done()
	for c := range s.hashq {
		s.h.Write(c)
		s.free <- c[:0]
	}
}

// Write copies p into the stream's buffers.
func (s *Stream) Write(p []byte) (int, error) {
	if s.closed {
		return 0, errors.New("outdir: write to a closed stream")
	}
	if err := s.failed(); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		k := copy(s.cur[len(s.cur):cap(s.cur)], p)
		s.cur = s.cur[:len(s.cur)+k]
		p = p[k:]
		if len(s.cur) == cap(s.cur) {
			s.write <- s.cur
			s.cur = <-s.free
		}
	}
	s.n += int64(n)
	return n, nil
}

// Size is the number of bytes written so far.
func (s *Stream) Size() int64 { return s.n }

// Discard stops the stream's goroutines without writing what is still
// buffered and without an fsync: for a file about to be removed.
func (s *Stream) Discard() {
	if s.closed {
		return
	}
	s.closed = true
	close(s.write)
	s.wg.Wait()
}

// Close writes the buffered bytes, waits for the writing and hashing
// goroutines and fsyncs the file (which it does not close). It returns the
// first error of any of them.
func (s *Stream) Close() error {
	if s.closed {
		return s.failed()
	}
	s.closed = true
	if len(s.cur) > 0 {
		s.write <- s.cur
	}
	close(s.write)
	s.wg.Wait()
	if err := s.failed(); err != nil {
		return err
	}
	return s.f.Sync()
}
