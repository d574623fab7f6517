package onnxio

import (
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"sparkconv/infile"
	"sparkconv/onnxpb"
)

// SanitizedBy is the metadata_props key sanitize sets on what it writes,
// with SanitizedByValue: how its output is recognised as sparkconv's.
const (
	SanitizedBy      = "sanitized_by"
	SanitizedByValue = "sparkconv sanitize"
	producer         = "sparkconv"
)

// SparkconvModel is the outdir.Owner of ONNX files: one whose
// producer_name is sparkconv (an export's graphs) or whose metadata_props
// hold sanitized_by = "sparkconv sanitize". Only the model's top-level
// fields are read; the graph is skipped, not parsed.
func SparkconvModel(path string) error {
	f, st, err := infile.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var off int64
	varint := func() (uint64, error) {
		var b [binary10]byte
		n, err := f.ReadAt(b[:], off)
		if n == 0 {
			return 0, err
		}
		v, k := protowire.ConsumeVarint(b[:n])
		if k < 0 {
			return 0, protowire.ParseError(k)
		}
		off += int64(k)
		return v, nil
	}
	for off < st.Size() {
		tag, err := varint()
		if err != nil {
			break
		}
		num, typ := protowire.DecodeTag(tag)
		switch typ {
		case protowire.VarintType:
			if _, err := varint(); err != nil {
				return notOurs(err)
			}
		case protowire.Fixed32Type:
			off += 4
		case protowire.Fixed64Type:
			off += 8
		case protowire.BytesType:
			n, err := varint()
			if err != nil || n > uint64(st.Size()-off) {
				return notOurs(errors.New("a field runs past the end"))
			}
			if (num == 2 || num == 14) && n <= 1<<20 {
				b := make([]byte, n)
				if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
					return notOurs(err)
				}
				if num == 2 && string(b) == producer {
					return nil
				}
				var p onnxpb.StringStringEntryProto
				if num == 14 && proto.Unmarshal(b, &p) == nil && p.GetKey() == SanitizedBy && p.GetValue() == SanitizedByValue {
					return nil
				}
			}
			off += int64(n)
		default:
			return notOurs(fmt.Errorf("wire type %d", typ))
		}
	}
	return errors.New("an ONNX file neither produced nor sanitized by sparkconv")
}

const binary10 = 10 // the longest varint

func notOurs(err error) error {
	return fmt.Errorf("not an ONNX file sparkconv wrote (%v)", err)
}
