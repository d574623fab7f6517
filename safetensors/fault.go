package safetensors

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"unsafe"

	"sparkconv/infile"
)

// A file that shrinks while it is mapped makes the next read past its new
// end fault (SIGBUS). Go turns such a fault into a panic only on a
// goroutine that asked for it (debug.SetPanicOnFault); Guard asks, and
// turns the panic into an error naming the file whose mapping faulted.
// The live mappings are registered here so a fault address names its file.

var mappings struct {
	sync.Mutex
	files map[*File]struct{}
}

func register(f *File) {
	mappings.Lock()
	defer mappings.Unlock()
	if mappings.files == nil {
		mappings.files = map[*File]struct{}{}
	}
	mappings.files[f] = struct{}{}
}

func unregister(f *File) {
	mappings.Lock()
	defer mappings.Unlock()
	delete(mappings.files, f)
}

// fileAt returns the mapped file holding addr and the offset into it.
func fileAt(addr uintptr) (*File, int64) {
	mappings.Lock()
	defer mappings.Unlock()
	for f := range mappings.files {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(f.data)))
		if addr >= lo && addr < lo+uintptr(len(f.data)) {
			return f, int64(addr - lo)
		}
	}
	return nil, 0
}

// Guard runs fn on the calling goroutine with faults turned into panics,
// and returns a fault on a mapped safetensors file as an error naming the
// file. Other panics pass through. Wrap in it any goroutine that reads a
// slice returned by Raw (the package's own decoders already are).
func Guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if ferr := FaultError(r); ferr != nil {
				err = ferr
				return
			}
			panic(r)
		}
	}()
	return fn()
}

// FaultError returns the error for a recovered panic value r when it is a
// memory fault inside a mapped safetensors file, else nil.
func FaultError(r any) error {
	re, ok := r.(runtime.Error)
	if !ok {
		return nil
	}
	a, ok := re.(interface{ Addr() uintptr })
	if !ok {
		return nil
	}
	f, off := fileAt(a.Addr())
	if f == nil {
		return nil
	}
	return fmt.Errorf("%s: %w (reading byte %d of its %d faulted: the file shrank or was rewritten); nothing written, run again",
		f.Path, infile.ErrChanged, off, f.stamp.Size)
}
