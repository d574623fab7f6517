package qnn

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"
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

// Report is the lint of one graph file (and of its encodings file).
type Report struct {
	File      string    `json:"file"`
	Encodings string    `json:"encodings,omitempty"`
	Errors    int       `json:"errors"`
	Warnings  int       `json:"warnings"`
	Findings  []Finding `json:"findings"`
	Nodes     int       `json:"-"` // the graph's node count
}

// LintFile lints the graph at path, and with encodings ("": none) the
// graph against that AIMET encodings file.
func LintFile(path, encodings string) (*Report, error) {
	m, err := onnxio.ReadModelFile(path)
	if err != nil {
		return nil, err
	}
	rep := &Report{File: path, Findings: Lint(m), Nodes: len(m.GetGraph().GetNode())}
	if encodings != "" {
		enc, err := ReadEncodings(encodings)
		if err != nil {
			return nil, err
		}
		rep.Encodings = encodings
		rep.Findings = append(rep.Findings, LintEncodings(m, enc)...)
	}
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	rep.Errors, rep.Warnings = Count(rep.Findings)
	return rep, nil
}

// GraphFiles expands paths to graph files: a folder stands for every .onnx
// file below it, in name order. Every export folder among them (one holding
// a manifest.json) has its files checked against the manifest's sha256s
// first (onnxgraph.ReadVerified), as verify does.
func GraphFiles(paths []string) ([]string, error) {
	var files []string
	for _, a := range paths {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, a)
			continue
		}
		var found []string
		err = filepath.WalkDir(a, func(p string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() && strings.EqualFold(filepath.Ext(p), ".onnx") {
				found = append(found, p)
			}
			if err == nil && !e.IsDir() && e.Name() == onnxgraph.ManifestFile { // an export: its files checked first
				_, err = onnxgraph.ReadVerified(filepath.Dir(p))
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no .onnx file in the folder", a)
		}
		sort.Strings(found)
		files = append(files, found...)
	}
	return files, nil
}

// SanitizeReport is what SanitizeFile did.
type SanitizeReport struct {
	Input    string    `json:"input"`
	Output   string    `json:"output"`
	Bytes    int64     `json:"bytes"`
	Changes  []Change  `json:"changes"`
	Errors   int       `json:"errors"`
	Warnings int       `json:"warnings"`
	Findings []Finding `json:"findings"`
}

// SanitizeFile sanitizes the graph file in (Sanitize), lints the result and
// writes it to out (onnxio: a temporary file renamed into place; an existing
// out is replaced only with force, and only a sparkconv model), marked in
// its metadata as sanitize's. A graph with external data must be written
// into the folder of in, where its relative data locations still resolve.
func SanitizeFile(in, out string, force bool) (*SanitizeReport, error) {
	m, err := onnxio.ReadModelFile(in)
	if err != nil {
		return nil, err
	}
	if locs := onnxio.ExternalLocations(m); len(locs) > 0 {
		ai, err1 := filepath.Abs(filepath.Dir(in))
		ao, err2 := filepath.Abs(filepath.Dir(out))
		if err1 != nil || err2 != nil || ai != ao {
			return nil, fmt.Errorf("%s keeps tensor data in %s (relative to its folder); write %s into %s so those locations still resolve",
				in, strings.Join(locs, ", "), filepath.Base(out), filepath.Dir(in))
		}
	}
	changes, err := Sanitize(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w; nothing written", in, err)
	}
	rep := &SanitizeReport{Input: in, Output: out, Changes: changes, Findings: Lint(m)}
	if rep.Changes == nil {
		rep.Changes = []Change{}
	}
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	rep.Errors, rep.Warnings = Count(rep.Findings)
	markSanitized(m)
	info, err := onnxio.WriteFile(out, onnxio.Model{Proto: m}, onnxio.WriteOptions{Force: force, Owner: onnxio.SparkconvModel, Inputs: []string{in}})
	if err != nil {
		return nil, err
	}
	rep.Bytes = info.Size
	return rep, nil
}

// markSanitized records in the model's metadata_props that sanitize wrote
// it, by which a later --force recognises the file as sparkconv's.
func markSanitized(m *onnxpb.ModelProto) {
	for _, p := range m.MetadataProps {
		if p.GetKey() == onnxio.SanitizedBy {
			p.Value = proto.String(onnxio.SanitizedByValue)
			return
		}
	}
	m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(onnxio.SanitizedBy), Value: proto.String(onnxio.SanitizedByValue)})
}
