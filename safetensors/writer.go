package safetensors

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	st "github.com/nlpodyssey/safetensors"

	"sparkconv/dtype"
	"sparkconv/outdir"
)

// Tensor is one tensor to write. Produce is called once, when the writer
// reaches the tensor, so a converter holds only the tensor in flight.
type Tensor struct {
	Name    string
	DType   dtype.DType
	Shape   []int64
	Produce func() ([]byte, error)
}

// Bytes is the tensor's data size.
func (t Tensor) Bytes() int64 {
	n := int64(t.DType.Size())
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// WriteOptions control WriteCheckpoint.
type WriteOptions struct {
	// MaxShardSize splits the checkpoint into shards of at most this many
	// tensor bytes (a single larger tensor gets a shard of its own); 0 means
	// one file.
	MaxShardSize int64
	// Shards, when > 1, splits the tensors into exactly this many shards of
	// about equal size instead (it overrides MaxShardSize).
	Shards int
	// Metadata is each shard's __metadata__ (e.g. {"format": "pt"}).
	Metadata map[string]string
	// Done, if set, is called after each tensor is written.
	Done func(t Tensor)
}

// WriteCheckpoint writes tensors into dir as model.safetensors, or as
// model-0000i-of-0000n.safetensors shards plus model.safetensors.index.json
// when they exceed MaxShardSize. Tensors go into shards in the given order;
// within a shard the order is the reference library's (descending dtype
// alignment, then name). Files are fsynced. It returns the file names written.
func WriteCheckpoint(dir string, tensors []Tensor, opt WriteOptions) ([]string, error) {
	shards := planShards(tensors, opt.MaxShardSize)
	if opt.Shards > 1 {
		shards = splitEven(tensors, opt.Shards)
	}
	if len(shards) == 1 {
		if err := writeFile(filepath.Join(dir, SingleFile), shards[0], opt); err != nil {
			return nil, err
		}
		return []string{SingleFile}, nil
	}
	idx := Index{Metadata: map[string]any{}, WeightMap: map[string]string{}}
	var files []string
	var total int64
	for i, shard := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := writeFile(filepath.Join(dir, name), shard, opt); err != nil {
			return nil, err
		}
		for _, t := range shard {
			idx.WeightMap[t.Name] = name
			total += t.Bytes()
		}
		files = append(files, name)
	}
	idx.Metadata["total_size"] = total
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := WriteFileSync(filepath.Join(dir, IndexFile), append(data, '\n')); err != nil {
		return nil, err
	}
	return append(files, IndexFile), nil
}

func planShards(tensors []Tensor, max int64) [][]Tensor {
	var shards [][]Tensor
	var cur []Tensor
	var size int64
	for _, t := range tensors {
		if max > 0 && len(cur) > 0 && size+t.Bytes() > max {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += t.Bytes()
	}
	return append(shards, cur)
}

// splitEven cuts tensors, in order, into n groups of about equal bytes
// (fewer when there are fewer tensors than n).
func splitEven(tensors []Tensor, n int) [][]Tensor {
	var total int64
	for _, t := range tensors {
		total += t.Bytes()
	}
	var shards [][]Tensor
	var cur []Tensor
	var done int64
	for i, t := range tensors {
		cur = append(cur, t)
		done += t.Bytes()
		left := len(tensors) - i - 1
		need := n - len(shards) - 1 // shards still to start after this one
		if need > 0 && left >= need && (done*int64(n) >= total*int64(len(shards)+1) || left == need) {
			shards = append(shards, cur)
			cur = nil
		}
	}
	if len(cur) > 0 {
		shards = append(shards, cur)
	}
	return shards
}

// lazyView adapts a Tensor to nlpodyssey's View; Data takes the bytes
// the prefetcher produced.
type lazyView struct {
	t    Tensor
	sink *errSink
	opt  *WriteOptions
	pre  *prefetch
}

func (v lazyView) DType() st.DType {
	d, _ := st.ParseDType(string(v.t.DType))
	return d
}

func (v lazyView) Shape() []uint64 {
	s := make([]uint64, len(v.t.Shape))
	for i, d := range v.t.Shape {
		s[i] = uint64(d)
	}
	return s
}

func (v lazyView) DataLen() uint64 { return uint64(v.t.Bytes()) }

func (v lazyView) Data() []byte {
	v.sink.finish() // the previous tensor has been written by now
	if v.sink.err != nil {
		return nil
	}
	b, err := v.pre.take(v.t.Name)
	if err == nil && int64(len(b)) != v.t.Bytes() {
		err = fmt.Errorf("produced %d bytes for %s%v, want %d", len(b), v.t.DType, v.t.Shape, v.t.Bytes())
	}
	if err != nil {
		v.sink.err = fmt.Errorf("tensor %q: %w", v.t.Name, err)
		return nil
	}
	if v.opt.Done != nil {
		v.sink.pending = func() { v.opt.Done(v.t) }
	}
	return b
}

// errSink is an io.Writer that refuses writes once a tensor failed, so
// SerializeToWriter stops at the first error.
type errSink struct {
	w   io.Writer
	err error
	// pending reports a tensor done once its bytes are written, which is
	// known at the next Data call (the writer writes each tensor's bytes
	// before asking for the next) or at the end.
	pending func()
}

func (e *errSink) finish() {
	if e.pending != nil {
		e.pending()
		e.pending = nil
	}
}

func (e *errSink) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return e.w.Write(p)
}

// prefetch produces a file's tensors one ahead of the serializer, in the
// order it writes them: tensor i+1 is produced while tensor i is written.
type prefetch struct {
	ready chan produced
	stop  chan struct{}
	done  chan struct{}
}

type produced struct {
	name string
	b    []byte
	err  error
}

// fileOrder is the order nlpodyssey's serializer writes views in: dtype
// descending (its enum order), then name.
func fileOrder(views map[string]lazyView) []lazyView {
	order := make([]lazyView, 0, len(views))
	for _, v := range views {
		order = append(order, v)
	}
	sort.Slice(order, func(i, j int) bool {
		l, r := order[i].DType(), order[j].DType()
		return l > r || (l == r && order[i].t.Name < order[j].t.Name)
	})
	return order
}

func startPrefetch(order []lazyView) *prefetch {
	p := &prefetch{ready: make(chan produced), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for _, v := range order {
			b, err := v.t.Produce()
			select {
			case p.ready <- produced{v.t.Name, b, err}:
			case <-p.stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return p
}

// take returns the bytes of the tensor the serializer asks for next.
func (p *prefetch) take(name string) ([]byte, error) {
	r, ok := <-p.ready
	switch {
	case !ok:
		return nil, fmt.Errorf("safetensors: tensor %q asked for after the last one", name)
	case r.name != name:
		return nil, fmt.Errorf("safetensors: writer asked for %q, prefetched %q", name, r.name)
	}
	return r.b, r.err
}

// close stops the producer and waits for it, so nothing reads the inputs
// after the file is done.
func (p *prefetch) close() {
	close(p.stop)
	<-p.done
}

func writeFile(path string, tensors []Tensor, opt WriteOptions) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := writeTo(f, path, tensors, opt); err != nil {
		return err
	}
	return f.Close()
}

// writeTo writes tensors into f, a new empty file (named path in errors),
// and fsyncs it.
func writeTo(f *os.File, path string, tensors []Tensor, opt WriteOptions) error {
	bw := outdir.NewStream(f, nil)
	defer bw.Discard() // after Close, a no-op
	sink := &errSink{w: bw}
	views := make(map[string]lazyView, len(tensors))
	for _, t := range tensors {
		if _, err := dtype.Parse(string(t.DType)); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", path, t.Name, err)
		}
		views[t.Name] = lazyView{t: t, sink: sink, opt: &opt}
	}
	pre := startPrefetch(fileOrder(views))
	defer pre.close()
	for k, v := range views {
		v.pre = pre
		views[k] = v
	}
	if err := st.SerializeToWriter(views, opt.Metadata, sink); err != nil {
		if sink.err != nil {
			err = sink.err
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	if sink.err != nil {
		return fmt.Errorf("%s: %w", path, sink.err)
	}
	if err := bw.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	sink.finish()
	return nil
}

// WriteFileSync creates path (which must not exist), writes data and fsyncs.
func WriteFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// WriteFile writes tensors as the safetensors file out: under a temporary
// name beside it, fsynced and renamed into place (outdir.File's rules).
func WriteFile(out *outdir.File, tensors []Tensor, opt WriteOptions) error {
	return out.Write(func(f *os.File) error { return writeTo(f, out.Target(), tensors, opt) })
}

// WriteNew writes tensors as the new file path inside a folder under
// construction (an outdir.Dir), which must not exist yet.
func WriteNew(path string, tensors []Tensor, opt WriteOptions) error {
	return writeFile(path, tensors, opt)
}
