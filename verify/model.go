package verify

import (
	"context"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/ortrun"
	"sparkconv/spark"
)

// Run loads ONNX Runtime (ortLib, else ortrun.FindORTLib's search),
// opens the checkpoint folder model as the reference, and runs the export
// in dirs against it (Run), refusing an export made from another checkpoint
// (its source fingerprint).
func Run(ctx context.Context, model string, dirs []string, ortLib string, o Options) (*Report, error) {
	lib, err := ortrun.FindORTLib(ortLib)
	if err != nil {
		return nil, err
	}
	if err := ortrun.Init(lib); err != nil {
		return nil, err
	}
	sm, err := spark.Open(model)
	if err != nil {
		return nil, err
	}
	if o.Fingerprint, err = onnxgraph.SourceFingerprint(sm); err != nil {
		sm.Close()
		return nil, err
	}
	ref, err := forward.New(sm, forward.Options{})
	if err != nil {
		sm.Close()
		return nil, err
	}
	defer ref.Close()
	return Compare(ctx, ref, dirs, o)
}
