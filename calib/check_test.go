package calib

import "testing"

// TestCheckVariety: the unknown-token share and distinct-id limits (the
// count rule: TestTakeChecks).
func TestCheckVariety(t *testing.T) {
	ids := func(n int, f func(i int) int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	cases := []struct {
		name     string
		ids      []int
		warn, ok bool
	}{
		{"varied", ids(1000, func(i int) int { return i % 500 }), false, true},
		{"few ids", ids(1000, func(i int) int { return i % 10 }), false, false},
		{"mostly unk", ids(1000, func(i int) int { return map[bool]int{true: 0, false: i}[i%4 != 0] }), false, false},
		{"some unk", ids(1000, func(i int) int { return map[bool]int{true: 0, false: 1 + i}[i%10 == 0] }), true, true},
		{"one id", ids(2000, func(i int) int { return 7 }), false, false},
	}
	for _, c := range cases {
		warn, err := CheckVariety([]Chunk{{IDs: c.ids}}, 0, 4096)
		if (err == nil) != c.ok || (warn != "") != c.warn {
			t.Errorf("%s: warn %q, err %v", c.name, warn, err)
		}
	}
}

// TestCheckVarietyShortText: the distinct-id limit scales down to a
// quarter of a short text (a bundle for a 64-position export), and still
// refuses a handful of ids.
func TestCheckVarietyShortText(t *testing.T) {
	for _, c := range []struct {
		n, distinct int
		ok          bool
	}{{64, 44, true}, {64, 16, true}, {64, 10, false}, {2000, 63, false}, {2000, 64, true}} {
		ids := make([]int, c.n)
		for i := range ids {
			ids[i] = 1 + i%c.distinct
		}
		if _, err := CheckVariety([]Chunk{{IDs: ids}}, 0, 4096); (err == nil) != c.ok {
			t.Errorf("%d tokens, %d distinct: %v", c.n, c.distinct, err)
		}
	}
}
