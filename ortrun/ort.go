package ortrun

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"sparkconv/infile"
	"sparkconv/onnxgraph"

	ort "github.com/yalue/onnxruntime_go"
)

// ORTLibEnv names the environment variable that points at
// libonnxruntime.so when --ort-lib is not given.
const ORTLibEnv = "SPARKCONV_ORT_LIB"

// ORTLocalPath is where scripts/install-ort.sh puts the library, relative
// to the repository root.
const ORTLocalPath = ".ort/libonnxruntime.so"

// ORTInstallHint says how to get the library.
const ORTInstallHint = "install it with scripts/install-ort.sh (it runs `npm pack onnxruntime-node@1.30.0` and copies " +
	"package/bin/napi-v6/linux/x64/libonnxruntime.so.1 to .ort/libonnxruntime.so), " +
	"or point --ort-lib or $" + ORTLibEnv + " at a libonnxruntime.so of ONNX Runtime >= 1.24"

// ErrNoORT is returned (wrapped) when no ONNX Runtime library is found.
var ErrNoORT = errors.New("ONNX Runtime shared library not found")

// FindORTLib returns the library to load: flagPath when set, else
// $SPARKCONV_ORT_LIB, else .ort/libonnxruntime.so in the sparkconv
// repository that holds the working directory or the executable.
func FindORTLib(flagPath string) (string, error) {
	for _, c := range []struct{ from, path string }{{"--ort-lib", flagPath}, {"$" + ORTLibEnv, os.Getenv(ORTLibEnv)}} {
		if c.path == "" {
			continue
		}
		if _, err := os.Stat(c.path); err != nil {
			return "", fmt.Errorf("%w: %s = %s: %v; %s", ErrNoORT, c.from, c.path, err, ORTInstallHint)
		}
		return c.path, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		if root := repoRoot(s); root != "" {
			p := filepath.Join(root, ORTLocalPath)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w (no --ort-lib, no $%s, no %s in the repository); %s", ErrNoORT, ORTLibEnv, ORTLocalPath, ORTInstallHint)
}

// repoRoot walks up from dir to the folder whose go.mod declares module
// sparkconv ("" when none).
func repoRoot(dir string) string {
	for {
		data, err := infile.ReadFile(filepath.Join(dir, "go.mod"), infile.ConfigMax)
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(data), []byte("module sparkconv")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

var ortState struct {
	sync.Mutex
	lib string
}

// Init loads the ONNX Runtime library once per process. Calling it again
// with the same path is a no-op; another path is an error.
func Init(lib string) error {
	ortState.Lock()
	defer ortState.Unlock()
	if ortState.lib != "" {
		if ortState.lib != lib {
			return fmt.Errorf("ONNX Runtime already loaded from %s, cannot also load %s", ortState.lib, lib)
		}
		return nil
	}
	ort.SetSharedLibraryPath(lib)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("loading ONNX Runtime from %s: %w", lib, err)
	}
	ortState.lib = lib
	return nil
}

// Version is the loaded library's version string.
func Version() string { return ort.GetVersion() }

// SessionOptions tunes a session.
type SessionOptions struct {
	// Threads is the intra-op thread count; 0 lets ONNX Runtime choose.
	Threads int
	// Optimize is ONNX Runtime's graph optimization level: "" or "all"
	// (the default), "extended", "basic" or "none".
	Optimize string
}

func optLevel(s string) (ort.GraphOptimizationLevel, error) {
	switch s {
	case "", "all":
		return ort.GraphOptimizationLevelEnableAll, nil
	case "extended":
		return ort.GraphOptimizationLevelEnableExtended, nil
	case "basic":
		return ort.GraphOptimizationLevelEnableBasic, nil
	case "none":
		return ort.GraphOptimizationLevelDisableAll, nil
	}
	return 0, fmt.Errorf("graph optimization level %q: want all, extended, basic or none", s)
}

// Session is one loaded model.
type Session struct {
	sess    *ort.DynamicAdvancedSession
	Inputs  []onnxgraph.ValueInfo
	Outputs []onnxgraph.ValueInfo
}

// NewSession loads a self-contained model from bytes.
func NewSession(model []byte, opt SessionOptions) (*Session, error) {
	in, out, err := ort.GetInputOutputInfoWithONNXData(model)
	if err != nil {
		return nil, fmt.Errorf("reading model inputs/outputs: %w", err)
	}
	return newSession(in, out, opt, func(names []string, outs []string, so *ort.SessionOptions) (*ort.DynamicAdvancedSession, error) {
		return ort.NewDynamicAdvancedSessionWithONNXData(model, names, outs, so)
	})
}

// OpenSession loads a model file (external data is found relative to it).
func OpenSession(path string, opt SessionOptions) (*Session, error) {
	in, out, err := ort.GetInputOutputInfo(path)
	if err != nil {
		return nil, fmt.Errorf("%s: reading inputs/outputs: %w", path, err)
	}
	s, err := newSession(in, out, opt, func(names []string, outs []string, so *ort.SessionOptions) (*ort.DynamicAdvancedSession, error) {
		return ort.NewDynamicAdvancedSession(path, names, outs, so)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

type sessionMaker func(in, out []string, so *ort.SessionOptions) (*ort.DynamicAdvancedSession, error)

func newSession(in, out []ort.InputOutputInfo, opt SessionOptions, make sessionMaker) (*Session, error) {
	if !ort.IsInitialized() {
		return nil, errors.New("ONNX Runtime not loaded (call ortrun.Init)")
	}
	s := &Session{}
	var inNames, outNames []string
	for _, i := range in {
		vi, err := ortValueInfo(i)
		if err != nil {
			return nil, err
		}
		s.Inputs = append(s.Inputs, vi)
		inNames = append(inNames, i.Name)
	}
	for _, o := range out {
		vi, err := ortValueInfo(o)
		if err != nil {
			return nil, err
		}
		s.Outputs = append(s.Outputs, vi)
		outNames = append(outNames, o.Name)
	}
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, err
	}
	defer so.Destroy()
	lvl, err := optLevel(opt.Optimize)
	if err != nil {
		return nil, err
	}
	if err := so.SetGraphOptimizationLevel(lvl); err != nil {
		return nil, err
	}
	if opt.Threads > 0 {
		if err := so.SetIntraOpNumThreads(opt.Threads); err != nil {
			return nil, err
		}
		if err := so.SetInterOpNumThreads(1); err != nil {
			return nil, err
		}
	}
	s.sess, err = make(inNames, outNames, so)
	if err != nil {
		return nil, fmt.Errorf("creating ONNX Runtime session: %w", err)
	}
	return s, nil
}

func ortValueInfo(i ort.InputOutputInfo) (onnxgraph.ValueInfo, error) {
	vi := onnxgraph.ValueInfo{Name: i.Name, Shape: append([]int64(nil), i.Dimensions...)}
	switch i.DataType {
	case ort.TensorElementDataTypeFloat:
		vi.DType = onnxgraph.Float32
	case ort.TensorElementDataTypeFloat16:
		vi.DType = onnxgraph.Float16
	case ort.TensorElementDataTypeInt64:
		vi.DType = onnxgraph.Int64
	default:
		return vi, fmt.Errorf("value %s has element type %s, which sparkconv does not use", i.Name, i.DataType)
	}
	return vi, nil
}

// Close releases the session.
func (s *Session) Close() error {
	if s.sess == nil {
		return nil
	}
	err := s.sess.Destroy()
	s.sess = nil
	return err
}

// Run feeds every input by name and returns every output by name.
func (s *Session) Run(feeds map[string]onnxgraph.Tensor) (map[string]onnxgraph.Tensor, error) {
	var values []ort.Value
	defer func() {
		for _, v := range values {
			v.Destroy()
		}
	}()
	ins := make([]ort.Value, len(s.Inputs))
	for i, vi := range s.Inputs {
		t, ok := feeds[vi.Name]
		if !ok {
			return nil, fmt.Errorf("input %s not fed", vi.Name)
		}
		v, err := toORT(vi, t)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", vi.Name, err)
		}
		values = append(values, v)
		ins[i] = v
	}
	if len(feeds) != len(s.Inputs) {
		return nil, fmt.Errorf("fed %d tensors, the model has %d inputs", len(feeds), len(s.Inputs))
	}
	outs := make([]ort.Value, len(s.Outputs))
	results := map[string]onnxgraph.Tensor{}
	var dynamic []int
	for i, vi := range s.Outputs {
		if !static(vi.Shape) {
			if vi.DType == onnxgraph.Float16 {
				return nil, fmt.Errorf("output %s: float16 outputs need a static shape (have %v)", vi.Name, vi.Shape)
			}
			dynamic = append(dynamic, i) // ONNX Runtime allocates it
			continue
		}
		t := onnxgraph.Tensor{DType: vi.DType, Shape: vi.Shape}
		n := onnxgraph.Numel(vi.Shape)
		var v ort.Value
		var err error
		switch vi.DType {
		case onnxgraph.Float32:
			t.F32 = make([]float32, n)
			v, err = ort.NewTensor(ort.Shape(vi.Shape), t.F32)
		case onnxgraph.Float16:
			t.F16 = make([]uint16, n)
			// float16 goes through CustomDataTensor; pre-allocating avoids
			// onnxruntime_go's output copy, which sizes custom types by
			// element count instead of bytes.
			v, err = ort.NewCustomDataTensor(ort.Shape(vi.Shape), u16Bytes(t.F16), ort.TensorElementDataTypeFloat16)
		case onnxgraph.Int64:
			t.I64 = make([]int64, n)
			v, err = ort.NewTensor(ort.Shape(vi.Shape), t.I64)
		}
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", vi.Name, err)
		}
		values = append(values, v)
		outs[i] = v
		results[vi.Name] = t
	}
	if err := s.sess.Run(ins, outs); err != nil {
		return nil, fmt.Errorf("ONNX Runtime run: %w", err)
	}
	for _, i := range dynamic {
		values = append(values, outs[i])
		switch v := outs[i].(type) {
		case *ort.Tensor[float32]:
			results[s.Outputs[i].Name] = onnxgraph.F32Tensor(v.GetShape(), append([]float32(nil), v.GetData()...))
		case *ort.Tensor[int64]:
			results[s.Outputs[i].Name] = onnxgraph.I64Tensor(v.GetShape(), append([]int64(nil), v.GetData()...))
		default:
			return nil, fmt.Errorf("output %s: unexpected value type %T", s.Outputs[i].Name, outs[i])
		}
	}
	return results, nil
}

func toORT(vi onnxgraph.ValueInfo, t onnxgraph.Tensor) (ort.Value, error) {
	if t.DType != vi.DType {
		return nil, fmt.Errorf("fed %s, model wants %s", t.DType, vi.DType)
	}
	if !slices.Equal(t.Shape, vi.Shape) {
		return nil, fmt.Errorf("fed shape %v, model wants %v", t.Shape, vi.Shape)
	}
	n := onnxgraph.Numel(t.Shape)
	switch t.DType {
	case onnxgraph.Float32:
		if int64(len(t.F32)) != n {
			return nil, fmt.Errorf("%d values for shape %v", len(t.F32), t.Shape)
		}
		return ort.NewTensor(ort.Shape(t.Shape), t.F32)
	case onnxgraph.Float16:
		if int64(len(t.F16)) != n {
			return nil, fmt.Errorf("%d values for shape %v", len(t.F16), t.Shape)
		}
		return ort.NewCustomDataTensor(ort.Shape(t.Shape), u16Bytes(t.F16), ort.TensorElementDataTypeFloat16)
	case onnxgraph.Int64:
		if int64(len(t.I64)) != n {
			return nil, fmt.Errorf("%d values for shape %v", len(t.I64), t.Shape)
		}
		return ort.NewTensor(ort.Shape(t.Shape), t.I64)
	}
	return nil, fmt.Errorf("unsupported dtype %s", t.DType)
}

// static reports whether every dimension is known and positive.
func static(shape []int64) bool {
	for _, d := range shape {
		if d < 1 {
			return false
		}
	}
	return shape != nil
}
