package gptq

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"sync"

	"sparkconv/convert"
	"sparkconv/quant"
)

// store keeps every solved target in a scratch file of the output folder
// (codes one byte each, then the parameters as float32), so that memory
// holds one module at a time, not the model; it is the Solution the
// writers read from.
type store struct {
	mu      sync.Mutex
	f       *os.File
	end     int64
	entries map[string]*entry
	cal     *convert.Calibration
	method  string
	repl    map[string][]float32 // float tensors the solve changed (SmoothQuant)
}

// entry locates one target's result in the file.
type entry struct {
	n, k, group int
	zeros       bool
	off         int64
	stats       quant.ErrStats
	report      *convert.ModuleReport
}

func newStore(f *os.File) *store {
	return &store{f: f, entries: map[string]*entry{}, method: "gptq", repl: map[string][]float32{}}
}

// put appends r for the target read from source.
func (s *store) put(source string, r *Result, rep *convert.ModuleReport) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &entry{n: r.N, k: r.K, group: r.Group, zeros: r.Zeros != nil, off: s.end, stats: r.Stats, report: rep}
	params := appendF32(nil, r.Scales)
	if r.Zeros != nil {
		params = appendF32(params, r.Zeros)
	}
	for _, b := range [][]byte{r.Codes, params} {
		if _, err := s.f.WriteAt(b, s.end); err != nil {
			return fmt.Errorf("solved codes of %s: %w", source, err)
		}
		s.end += int64(len(b))
	}
	s.entries[source] = e
	return nil
}

func appendF32(b []byte, v []float32) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// get reads a target's result back into r (its slices reused).
func (s *store) get(source string, r *Result) (*entry, error) {
	s.mu.Lock()
	e, ok := s.entries[source]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("gptq: %s was not solved", source)
	}
	r.size(e.n, e.k, e.group, e.zeros)
	r.Stats = e.stats
	if _, err := s.f.ReadAt(r.Codes, e.off); err != nil {
		return nil, fmt.Errorf("solved codes of %s: %w", source, err)
	}
	off := e.off + int64(len(r.Codes))
	for _, v := range [][]float32{r.Scales, r.Zeros} {
		if v == nil {
			continue
		}
		b := make([]byte, 4*len(v))
		if _, err := s.f.ReadAt(b, off); err != nil {
			return nil, fmt.Errorf("solved parameters of %s: %w", source, err)
		}
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		off += int64(len(b))
	}
	return e, nil
}

// Method is "gptq".
func (s *store) Method() string { return s.method }

// Choose fills dst with the solved codes and parameters of t.
func (s *store) Choose(dst *quant.Int4Result, t convert.Target, _ quant.Matrix, group int, _ quant.ScaleDType) error {
	r := Result{Codes: dst.Codes, Scales: dst.Scales}
	e, err := s.get(t.Source, &r)
	if err != nil {
		return err
	}
	if e.group != group {
		return fmt.Errorf("gptq: %s solved with group %d, written with %d", t.Source, e.group, group)
	}
	*dst = quant.Int4Result{N: r.N, K: r.K, Group: r.Group, Codes: r.Codes, Scales: r.Scales, Zeros: r.Zeros, Stats: r.Stats}
	return nil
}

// Recode is false: the codes are not a function of the parameters; the
// writer calls Choose again (a read of the scratch file).
func (s *store) Recode(*quant.Int4Result, quant.Matrix) bool { return false }

// ChooseInt8 fills dst with the solved int8 codes and scales of t.
func (s *store) ChooseInt8(dst *quant.Int8Result, t convert.Target) error {
	var r Result
	if _, err := s.get(t.Source, &r); err != nil {
		return err
	}
	codes := make([]int8, len(r.Codes))
	for i, c := range r.Codes {
		codes[i] = int8(c)
	}
	*dst = quant.Int8Result{N: r.N, K: r.K, Codes: codes, Scales: r.Scales, Stats: r.Stats}
	return nil
}

// Calibration is what the run did.
func (s *store) Calibration() *convert.Calibration { return s.cal }

// Module is t's report entry.
func (s *store) Module(t convert.Target) *convert.ModuleReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[t.Source]; ok {
		return e.report
	}
	return nil
}

// replace records new values for a float tensor of the input.
func (s *store) replace(name string, v []float32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repl[name] = v
}

// Replaced returns the new values of a float tensor the solve changed.
func (s *store) Replaced(name string) ([]float32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.repl[name]
	return v, ok
}
