package onnxgraph

import (
	"fmt"
	"reflect"
	"testing"
)

// cacheState is a cache of C slots (KV 1, D 1) holding the entries of
// positions 0..p-1 written one by one, each entry's value its position.
func cacheState(layout string, c, p int) *CacheState {
	st := &CacheState{Info: LayerInfo{Layout: layout, CacheSlots: c}, KV: 1, D: 1,
		Key: make([]float32, c), Value: make([]float32, c), Written: make([]bool, c)}
	for q := range p {
		st.Put(q, []float32{float32(q)}, []float32{float32(q)})
	}
	return st
}

// TestPrefillMask pins the chunk mask: a token sees exactly the C positions
// before it and itself, cached slots it would have overwritten included,
// and no later token of the chunk.
func TestPrefillMask(t *testing.T) {
	const M = -1
	cases := []struct {
		name      string
		layout    string
		c, p, n   int
		want      [][]float32
		wantCache []float32 // after Put of the chunk's n entries
	}{
		// Slots hold positions 3, 4, 2; position 6 no longer sees 2.
		{"ring crossing the window", LayoutRing, 3, 5, 2, [][]float32{{0, 0, 0, 0, M}, {0, 0, M, 0, 0}}, []float32{6, 4, 5}},
		// A chunk longer than the cache: the chunk's own tokens leave the window.
		{"ring chunk past C", LayoutRing, 2, 0, 4, [][]float32{
			{M, M, 0, M, M, M}, {M, M, 0, 0, M, M}, {M, M, 0, 0, 0, M}, {M, M, M, 0, 0, 0}}, []float32{2, 3}},
		{"roll half full", LayoutRoll, 4, 2, 3, [][]float32{
			{M, M, 0, 0, 0, M, M}, {M, M, 0, 0, 0, 0, M}, {M, M, 0, 0, 0, 0, 0}}, []float32{1, 2, 3, 4}},
		// Position 6 is 4 past position 2 (slot 0 of a full roll cache).
		{"roll full", LayoutRoll, 4, 6, 2, [][]float32{{0, 0, 0, 0, 0, M}, {M, 0, 0, 0, 0, 0}}, []float32{4, 5, 6, 7}},
		{"empty ring, one token", LayoutRing, 3, 0, 1, [][]float32{{M, M, M, 0}}, []float32{0, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := cacheState(tc.layout, tc.c, tc.p)
			m := st.PrefillMask(tc.p, tc.n, M)
			var got [][]float32
			for r := range tc.n {
				got = append(got, m[r*(tc.c+tc.n):(r+1)*(tc.c+tc.n)])
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("mask\n got %v\nwant %v", got, tc.want)
			}
			if tc.n == 1 && !reflect.DeepEqual(m, st.Mask(M)) {
				t.Errorf("one-token chunk %v differs from the decode mask %v", m, st.Mask(M))
			}
			entries := make([]float32, tc.n)
			for u := range entries {
				entries[u] = float32(tc.p + u)
			}
			st.Put(tc.p, entries, entries)
			if tc.layout == LayoutRing && tc.p+tc.n < tc.c {
				return // slots never written keep their zeros
			}
			if !reflect.DeepEqual(st.Key, tc.wantCache) || !reflect.DeepEqual(st.Value, tc.wantCache) {
				t.Errorf("cache after the chunk: key %v value %v, want %v", st.Key, st.Value, tc.wantCache)
			}
			// The cache now holds positions 0..p+n-1 as single steps leave it.
			ref := cacheState(tc.layout, tc.c, tc.p+tc.n)
			if !reflect.DeepEqual(st.Key, ref.Key) || !reflect.DeepEqual(st.Written, ref.Written) || st.Filled != ref.Filled {
				t.Errorf("chunk Put %v (filled %d) differs from %d single Puts %v (filled %d)", st.Key, st.Filled, tc.n, ref.Key, ref.Filled)
			}
		})
	}
}

func TestChunks(t *testing.T) {
	for _, c := range []struct {
		length, n int
		want      string
	}{
		{1, 16, "[{0 1}]"}, {15, 16, "[{0 15}]"}, {16, 16, "[{0 16}]"}, {17, 16, "[{0 16} {16 1}]"}, {332, 128, "[{0 128} {128 128} {256 76}]"},
	} {
		if got := fmt.Sprint(Chunks(c.length, c.n)); got != c.want {
			t.Errorf("Chunks(%d, %d) = %s, want %s", c.length, c.n, got, c.want)
		}
	}
	ids := PrefillIDs([]int{5, 6, 7}, Chunk{Start: 1, Valid: 2}, 4)
	if !reflect.DeepEqual(ids.I64, []int64{6, 7, 0, 0}) || !reflect.DeepEqual(ids.Shape, []int64{1, 4}) {
		t.Errorf("PrefillIDs = %v %v", ids.Shape, ids.I64)
	}
}

// TestPrefillEntries reads new_key [1,KV,D,n] and new_value [1,KV,n,D]
// into [v, KV, D] rows.
func TestPrefillEntries(t *testing.T) {
	kv, d, n := 2, 3, 4
	key, val := make([]float32, kv*d*n), make([]float32, kv*d*n)
	for h := range kv {
		for j := range d {
			for u := range n {
				key[(h*d+j)*n+u] = float32(100*u + 10*h + j)
				val[(h*n+u)*d+j] = float32(-(100*u + 10*h + j))
			}
		}
	}
	out := map[string]Tensor{"new_key_L3": F32Tensor([]int64{1, 2, 3, 4}, key), "new_value_L3": F32Tensor([]int64{1, 2, 4, 3}, val)}
	k, v, err := PrefillEntries(out, kv, d, n, 2, "_L3")
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 1, 2, 10, 11, 12, 100, 101, 102, 110, 111, 112}
	for i := range want {
		if k[i] != want[i] || v[i] != -want[i] {
			t.Fatalf("entries %v / %v, want %v", k, v, want)
		}
	}
	if _, _, err := PrefillEntries(out, kv, d, n, 2, ""); err == nil {
		t.Error("missing outputs accepted")
	}
}
