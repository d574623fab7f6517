package outdir

import (
	"errors"
	"hash"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Stream sizes: bytes are handed to the writing goroutine in chunks of
// streamChunk; the kernel is asked to start writing back every chunk as
// soon as it is written, and the writer waits for the chunk streamLag bytes
// behind to be on disk, so dirty pages stay bounded and the closing fsync
// finds almost nothing left to do.
const (
	streamChunk  = 4 << 20
	streamChunks = 4 // chunk buffers in flight
	streamLag    = 64 << 20
)

// Stream writes one file through a buffer and flushes as it goes: write(2)
// and write-back run on a goroutine of their own (sync_file_range starts the
// write-back of each chunk as it is written), and the optional hash is
// computed on a third goroutine, so the caller only fills buffers. Close
// writes what is left, fsyncs the file and reports the first error. A
// Stream is not safe for concurrent use.
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
}

// NewStream returns a Stream writing to f from its current offset (0 for
// a new file); h, if not nil, receives every byte written.
func NewStream(f *os.File, h hash.Hash) *Stream {
	s := &Stream{f: f, h: h, free: make(chan []byte, streamChunks), write: make(chan []byte, streamChunks)}
	for range streamChunks {
		s.free <- make([]byte, 0, streamChunk)
	}
	s.wg.Add(1)
	go s.writer()
	if h != nil {
		s.hashq = make(chan []byte, streamChunks)
		s.wg.Add(1)
		go s.hasher()
	}
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
		if !broken {
			if _, err := s.f.Write(c); err != nil {
				s.fail(err)
				broken = true
			} else {
				// Advisory: a file system without sync_file_range is
				// still made durable by Close's fsync.
				_ = unix.SyncFileRange(fd, off, int64(len(c)), unix.SYNC_FILE_RANGE_WRITE)
				off += int64(len(c))
				if behind := off - streamLag; behind > synced {
					_ = unix.SyncFileRange(fd, synced, behind-synced,
						unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
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
