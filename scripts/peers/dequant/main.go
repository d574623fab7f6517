// Command dequant writes a sparkconv build as a float32 Spark checkpoint:
// every quantized linear dequantized by the reader `sparkconv eval` uses
// (convert.OpenWeights), every float tensor widened to float32, and
// config.json without its quantization_config. Scored by `sparkconv eval`,
// it measures the build's weights alone, with float32 activations, as a
// weight-only peer's dequantized checkpoint is measured
// (scripts/peers/run.sh).
//
//	go run ./scripts/peers/dequant BUILD OUT
//
// OUT must not exist; it is written beside itself and renamed into place.
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"sparkconv/convert"
	"sparkconv/dtype"
	"sparkconv/forward"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: dequant BUILD OUT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "dequant:", err)
		os.Exit(1)
	}
}

func run(build, out string) error {
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists", out)
	}
	w, err := convert.OpenWeights(build)
	if err != nil {
		return err
	}
	defer w.Close()
	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := writeConfig(build, tmp); err != nil {
		return err
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		if data, err := os.ReadFile(filepath.Join(build, f)); err == nil {
			if err := os.WriteFile(filepath.Join(tmp, f), data, 0o644); err != nil {
				return err
			}
		}
	}
	if err := writeTensors(w, filepath.Join(tmp, "model.safetensors")); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dequant: %s (%s) -> %s, float32\n", build, w.Describe(), out)
	return os.Rename(tmp, out)
}

// writeConfig copies config.json without quantization_config.
func writeConfig(build, dir string) error {
	data, err := os.ReadFile(filepath.Join(build, "config.json"))
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("%s/config.json: %w", build, err)
	}
	delete(cfg, "quantization_config")
	cfg["torch_dtype"] = "float32"
	data, err = json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644)
}

// writeTensors writes every tensor of the config in float32, one at a time.
func writeTensors(w forward.Weights, path string) error {
	specs := w.Config().Tensors()
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, s := range specs {
		n := int64(4)
		for _, d := range s.Shape {
			n *= d
		}
		header[s.Name] = map[string]any{"dtype": "F32", "shape": s.Shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := binary.Write(f, binary.LittleEndian, uint64(len(hj))); err != nil {
		return err
	}
	if _, err := f.Write(hj); err != nil {
		return err
	}
	for _, s := range specs {
		n := 1
		for _, d := range s.Shape {
			n *= int(d)
		}
		vals := make([]float32, n)
		dt, raw, ok, err := w.Float(s.Name)
		if err != nil {
			return err
		}
		if ok {
			err = dtype.ToFloat32(vals, raw, dt)
		} else {
			_, err = w.Dequantize(s.Name, vals)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		buf := make([]byte, 4*n)
		for i, v := range vals {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		if _, err := f.Write(buf); err != nil {
			return err
		}
		w.Release(s.Name)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
