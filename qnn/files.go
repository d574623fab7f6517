package qnn

import (
	"fmt"
	"path/filepath"

	"sparkconv/onnxio"
)

// lintMaxRaw is the largest initializer payload LintFiles reads back:
// every constant (scalars, shapes, axes, norm weights) is far smaller; the
// big weights' bytes do not matter to any rule.
const lintMaxRaw = 1 << 20

// LintFiles lints the graph files (names inside dir) as written, without
// the payload of their big weights, which would cost a copy of the model:
// the findings by file (files with none left out) and their counts.
func LintFiles(dir string, files []string) (findings map[string][]Finding, errors, warnings int, err error) {
	findings = map[string][]Finding{}
	for _, f := range files {
		mp, err := onnxio.ReadStructure(filepath.Join(dir, f), lintMaxRaw)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("lint: %w", err)
		}
		fs := Lint(mp)
		e, w := Count(fs)
		errors, warnings = errors+e, warnings+w
		if len(fs) > 0 {
			findings[f] = fs
		}
	}
	return findings, errors, warnings, nil
}
