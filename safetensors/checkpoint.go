package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"sparkconv/infile"
)

// IndexFile and SingleFile are the two ways a Hugging Face checkpoint folder
// names its weights.
const (
	IndexFile  = "model.safetensors.index.json"
	SingleFile = "model.safetensors"
)

// Index is model.safetensors.index.json.
type Index struct {
	Metadata  map[string]any    `json:"metadata,omitempty"`
	WeightMap map[string]string `json:"weight_map"`
}

// Checkpoint is a folder of one or more safetensors shards.
type Checkpoint struct {
	Dir    string
	files  []*File
	byName map[string]*File
	names  []string
}

// OpenDir opens the checkpoint in dir: model.safetensors.index.json when
// present (sharded), else model.safetensors. Every shard is validated; index
// shard names must be plain file names inside dir, and every indexed tensor
// must be in the shard the index names. A file that is a symlink is followed
// wherever it points (the Hugging Face cache keeps snapshots/REV/NAME as
// links to ../../blobs/HASH) as long as it ends at a regular file.
func OpenDir(dir string) (*Checkpoint, error) {
	idxPath := filepath.Join(dir, IndexFile)
	if _, err := os.Lstat(idxPath); err == nil {
		return openIndexed(dir, idxPath)
	}
	single := filepath.Join(dir, SingleFile)
	if _, err := os.Lstat(single); err != nil {
		return nil, fmt.Errorf("%s: no %s or %s", dir, IndexFile, SingleFile)
	}
	f, err := OpenFile(single)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, byName: map[string]*File{}}
	c.add(f)
	c.finish()
	return c, nil
}

// oneLayout refuses a folder holding both model.safetensors and an index
// naming other shards: transformers loads the single file, vLLM the shards
// the index names, so the consumers would run different weights.
func oneLayout(dir string, idx *Index) error {
	if _, err := os.Lstat(filepath.Join(dir, SingleFile)); err != nil {
		return nil
	}
	for _, shard := range idx.WeightMap {
		if shard != SingleFile {
			return fmt.Errorf("%s holds both %s and %s naming other shards (%s): transformers loads %s, vLLM the shards, so which weights run would depend on the consumer; remove the one that is not the model", dir, SingleFile, IndexFile, shard, SingleFile)
		}
	}
	return nil
}

// ParseIndex parses index JSON and checks each shard name is a plain file
// name (no separators, no "..", not absolute). path names the file in errors.
// Anything but white space after the JSON object is refused.
func ParseIndex(data []byte, path string) (*Index, error) {
	var idx Index
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&idx); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %w", path, err)
	}
	if off := dec.InputOffset(); strings.TrimSpace(string(data[off:])) != "" {
		return nil, fmt.Errorf("%s: invalid JSON: data after the index object at byte %d", path, off)
	}
	if idx.WeightMap == nil {
		return nil, fmt.Errorf("%s: missing weight_map", path)
	}
	for tensor, shard := range idx.WeightMap {
		if err := checkShardName(shard); err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w", path, tensor, err)
		}
	}
	return &idx, nil
}

func checkShardName(shard string) error {
	switch {
	case shard == "" || shard == "." || shard == "..":
		return fmt.Errorf("shard name %q is not a file name", shard)
	case filepath.IsAbs(shard) || strings.HasPrefix(shard, "/"):
		return fmt.Errorf("shard name %q is an absolute path", shard)
	case strings.ContainsAny(shard, `/\`) || strings.ContainsRune(shard, 0):
		return fmt.Errorf("shard name %q is not a plain file name inside the model folder", shard)
	}
	return nil
}

func openIndexed(dir, idxPath string) (*Checkpoint, error) {
	data, err := infile.ReadFile(idxPath, infile.IndexMax)
	if err != nil {
		return nil, err
	}
	idx, err := ParseIndex(data, idxPath)
	if err != nil {
		return nil, err
	}
	if err := oneLayout(dir, idx); err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, byName: map[string]*File{}}
	shards := map[string]*File{}
	for _, shard := range sortedValues(idx.WeightMap) {
		p := filepath.Join(dir, shard)
		if _, err := os.Stat(p); err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: shard %q: %w", idxPath, shard, err)
		}
		f, err := OpenFile(p)
		if err != nil {
			c.Close()
			return nil, err
		}
		shards[shard] = f
		c.files = append(c.files, f)
	}
	var problems []string
	for _, name := range sortedKeys(idx.WeightMap) {
		f := shards[idx.WeightMap[name]]
		if _, ok := f.Header.Tensor(name); !ok {
			problems = append(problems, fmt.Sprintf("tensor %q is indexed in %s but not found there", name, idx.WeightMap[name]))
			continue
		}
		c.byName[name] = f
	}
	for shard, f := range shards {
		for _, t := range f.Header.Tensors {
			if idx.WeightMap[t.Name] != shard {
				problems = append(problems, fmt.Sprintf("tensor %q in %s is not indexed to that shard", t.Name, shard))
			}
		}
	}
	if len(problems) > 0 {
		c.Close()
		sort.Strings(problems)
		return nil, fmt.Errorf("%s: %s", idxPath, strings.Join(problems, "; "))
	}
	c.finish()
	return c, nil
}

func (c *Checkpoint) add(f *File) {
	c.files = append(c.files, f)
	for _, t := range f.Header.Tensors {
		c.byName[t.Name] = f
	}
}

func (c *Checkpoint) finish() {
	c.names = sortedKeys(c.byName)
}

// Close unmaps every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// Unchanged reports an error naming the first shard that was written to,
// truncated or extended since it was opened.
func (c *Checkpoint) Unchanged() error {
	for _, f := range c.files {
		if err := f.Unchanged(); err != nil {
			return err
		}
	}
	return nil
}

// Files lists the open shards.
func (c *Checkpoint) Files() []*File { return c.files }

// Names lists every tensor, sorted.
func (c *Checkpoint) Names() []string { return c.names }

// Info returns a tensor's dtype, shape and offsets.
func (c *Checkpoint) Info(name string) (TensorInfo, bool) {
	f, ok := c.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Header.Tensor(name)
}

// Has reports whether the checkpoint holds the tensor.
func (c *Checkpoint) Has(name string) bool { _, ok := c.byName[name]; return ok }

// Raw returns the tensor's bytes (a read-only slice of the mapping).
func (c *Checkpoint) Raw(name string) (TensorInfo, []byte, error) {
	f, ok := c.byName[name]
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("%s: no tensor %q", c.Dir, name)
	}
	return f.Raw(name)
}

// Float32 decodes a float tensor into a new float32 slice.
func (c *Checkpoint) Float32(name string) (TensorInfo, []float32, error) {
	f, ok := c.byName[name]
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("%s: no tensor %q", c.Dir, name)
	}
	return f.Float32(name)
}

// File returns the path of the shard holding the tensor.
func (c *Checkpoint) File(name string) string {
	if f, ok := c.byName[name]; ok {
		return f.Path
	}
	return ""
}

// TotalBytes is the sum of all tensors' data sizes.
func (c *Checkpoint) TotalBytes() int64 {
	var n int64
	for _, name := range c.names {
		t, _ := c.Info(name)
		n += t.End - t.Begin
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedValues(m map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range m {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// Release tells the kernel this process no longer needs the tensor's pages
// resident (they stay in the page cache), so streaming a whole model keeps
// the resident set near one tensor instead of the whole file.
func (c *Checkpoint) Release(name string) {
	if f, ok := c.byName[name]; ok {
		f.Release(name)
	}
}

// CheckFinite is File.CheckFinite of the named tensor: NaN/Inf refused,
// its pages not left resident by the scan.
func (c *Checkpoint) CheckFinite(name string) error {
	f, ok := c.byName[name]
	if !ok {
		return fmt.Errorf("%s: no tensor %q", c.Dir, name)
	}
	return f.CheckFinite(name)
}

// ReleaseAll drops every shard's pages from this process's resident set.
func (c *Checkpoint) ReleaseAll() {
	for _, f := range c.files {
		if f.data != nil {
			_ = unix.Madvise(f.data, unix.MADV_DONTNEED)
		}
	}
}
