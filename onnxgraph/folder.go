package onnxgraph

import (
	"context"

	"sparkconv/outdir"
	"sparkconv/progress"
	"sparkconv/spark"
)

// ExportFolder exports the checkpoint folder model into the folder out,
// written all at once (outdir: nothing is left half-written, an existing
// out is replaced only with force). check, when set, runs on the written
// graphs before they are committed; its error refuses the export (nothing
// is written) and is returned with the manifest.
func ExportFolder(ctx context.Context, model, out string, force bool, o ExportOptions, check func(dir string, man *Manifest) error) (*Manifest, error) {
	m, err := spark.Open(model)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	n, err := GraphCount(m.Config, o)
	if err != nil {
		return nil, err
	}
	bar := progress.New(int64(n), "export-onnx", false)
	o.Done = func(file string, _ int64) { bar.Describe(file); bar.Add(1) }
	d, err := outdir.Create(out, force, model)
	if err != nil {
		return nil, err
	}
	defer d.Abort()
	man, err := Export(ctx, m, d.Path(), o)
	if err != nil {
		return nil, err
	}
	bar.Done(true)
	if check != nil {
		if err := check(d.Path(), man); err != nil {
			return man, err
		}
	}
	return man, d.Commit()
}
