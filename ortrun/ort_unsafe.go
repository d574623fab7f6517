package ortrun

import "unsafe"

// u16Bytes views a uint16 slice as its little-endian bytes (amd64/arm64 are
// little-endian, which ONNX Runtime's float16 buffers assume).
func u16Bytes(v []uint16) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 2*len(v))
}
