package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sparkconv/onnxgraph"
	"sparkconv/qnn"
)

// Export is a finished ONNX export (export-onnx's JSON summary): the files
// written and what the QNN lint found in them.
type Export struct {
	Out          string                   `json:"out"`
	Files        []ExportFile             `json:"files"`
	Bytes        int64                    `json:"bytes"`
	Seconds      float64                  `json:"seconds"`
	MBPerSec     float64                  `json:"mb_per_s"`
	Lint         map[string][]qnn.Finding `json:"lint,omitempty"`
	LintErrors   int                      `json:"lint_errors"`
	LintWarnings int                      `json:"lint_warnings"`
	Manifest     *onnxgraph.Manifest      `json:"-"`
}

// ExportFile is one written graph with its weights file.
type ExportFile struct {
	File   string `json:"file"`
	Kind   string `json:"kind"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ErrLint is an export refused for the QNN lint's errors: nothing is
// written, and the Export returned with it holds the findings.
var ErrLint = errors.New("QNN lint errors")

// lintError is ErrLint with the count and the folder not written.
type lintError struct {
	errors int
	out    string
}

func (e lintError) Error() string {
	return fmt.Sprintf("export-onnx: the QNN lint found %d errors; nothing written to %s", e.errors, e.out)
}

func (e lintError) Is(target error) bool { return target == ErrLint }

// ExportONNX exports the checkpoint folder model into out (onnxgraph:
// written all at once, an existing out replaced only with force) and, with
// lint, runs the QNN lint on the written graphs before they are committed:
// an error there refuses the export (ErrLint).
func ExportONNX(ctx context.Context, model, out string, force bool, o onnxgraph.ExportOptions, lint bool) (*Export, error) {
	start := time.Now()
	ex := &Export{Out: out}
	_, err := onnxgraph.ExportFolder(ctx, model, out, force, o, func(dir string, man *onnxgraph.Manifest) error {
		ex.Manifest = man
		ex.count(man)
		if !lint {
			return nil
		}
		return ex.lint(dir, man)
	})
	if errors.Is(err, ErrLint) {
		return ex, lintError{ex.LintErrors, out}
	}
	if err != nil {
		return nil, err
	}
	ex.Seconds = time.Since(start).Seconds()
	ex.MBPerSec = float64(ex.Bytes) / 1e6 / ex.Seconds
	return ex, nil
}

// count lists the graphs and their bytes (a weights file shared by two
// graphs counts once).
func (ex *Export) count(man *onnxgraph.Manifest) {
	counted := map[string]bool{}
	for _, g := range man.AllGraphs() {
		size := g.Bytes
		if g.ExternalData != nil && !counted[g.ExternalData.Name] {
			size += g.ExternalData.Size
			counted[g.ExternalData.Name] = true
		}
		ex.Files = append(ex.Files, ExportFile{File: g.File, Kind: g.Kind, Bytes: size, SHA256: g.SHA256})
		ex.Bytes += size
	}
}

// lint runs the QNN lint on every graph in dir.
func (ex *Export) lint(dir string, man *onnxgraph.Manifest) error {
	var files []string
	for _, g := range man.AllGraphs() {
		files = append(files, g.File)
	}
	var err error
	if ex.Lint, ex.LintErrors, ex.LintWarnings, err = qnn.LintFiles(dir, files); err != nil {
		return err
	}
	if ex.LintErrors > 0 {
		return ErrLint
	}
	return nil
}
