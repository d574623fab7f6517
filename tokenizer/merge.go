package tokenizer

// mergeVal is what merging a pair gives: its rank (priority, lower first)
// and the id of the merged token.
type mergeVal struct {
	rank  int32
	newID int32
}

// mergeTable maps a pair of ids to its merge. It is an open-addressing
// hash table with linear probing whose slots hold key and value together
// (one cache line per probe): a merge step does two or three lookups,
// and with Go's generic map they were half of all encode time.
type mergeTable struct {
	slots []mergeSlot
	shift uint
	n     int // distinct pairs
}

// mergeSlot is one table slot; rank -1 marks it empty.
type mergeSlot struct {
	key uint64
	val mergeVal
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newMergeTable(n int) *mergeTable {
	size, shift := 16, uint(60)
	for size < 2*n {
		size *= 2
		shift--
	}
	t := &mergeTable{slots: make([]mergeSlot, size), shift: shift}
	for i := range t.slots {
		t.slots[i].val.rank = -1
	}
	return t
}

func (t *mergeTable) slot(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> t.shift)
}

// put inserts or overwrites (later merges of the same pair win, as when
// the reference collects its merges into a map).
func (t *mergeTable) put(key uint64, v mergeVal) {
	mask := len(t.slots) - 1
	for i := t.slot(key); ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.val.rank < 0 || sl.key == key {
			if sl.val.rank < 0 {
				t.n++
			}
			sl.key, sl.val = key, v
			return
		}
	}
}

func (t *mergeTable) get(a, b int32) (mergeVal, bool) {
	key := pairKey(a, b)
	mask := len(t.slots) - 1
	for i := t.slot(key); ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.key == key && sl.val.rank >= 0 {
			return sl.val, true
		}
		if sl.val.rank < 0 {
			return mergeVal{}, false
		}
	}
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32
	removed    bool
}

// mergeItem is a candidate merge of the symbol at pos with its successor,
// remembering the pair it was computed for. key orders the heap: rank in
// the high half, position in the low half, so one comparison gives the
// reference's order (lowest rank, then leftmost).
type mergeItem struct {
	key         uint64
	newID       int32
	left, right int32
}

func itemKey(rank, pos int32) uint64 { return uint64(uint32(rank))<<32 | uint64(uint32(pos)) }

func (it *mergeItem) pos() int32 { return int32(uint32(it.key)) }

// mergeHeap is a binary min-heap of merge candidates by key.
type mergeHeap []mergeItem

func (h *mergeHeap) push(it mergeItem) {
	*h = append(*h, it)
	h.up(len(*h) - 1)
}

func (h mergeHeap) up(i int) {
	it := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if h[p].key <= it.key {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = it
}

func (h mergeHeap) down(i int) {
	it := h[i]
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].key < h[c].key {
			c = r
		}
		if it.key <= h[c].key {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = it
}

func (h *mergeHeap) pop() mergeItem {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	if last > 0 {
		q.down(0)
	}
	*h = q
	return top
}

// heapify orders an arbitrary slice into a heap in O(n).
func (h mergeHeap) heapify() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// scratch holds the buffers one Encode call reuses across words.
type scratch struct {
	syms []symbol
	heap mergeHeap
}

// addSymbol appends id to the linked list in sc.syms.
func (sc *scratch) addSymbol(id int32) {
	n := int32(len(sc.syms))
	sc.syms = append(sc.syms, symbol{id: id, prev: n - 1, next: -1})
	if n > 0 {
		sc.syms[n-1].next = n
	}
}

// mergeAll applies merges lowest rank first (leftmost on ties): the
// priority-queue walk of the reference's Word::merge_all, O(n log n).
func (t *mergeTable) mergeAll(sc *scratch) {
	syms := sc.syms
	if len(syms) < 2 {
		return
	}
	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if mv, ok := t.get(syms[i].id, syms[i+1].id); ok {
			h = append(h, mergeItem{itemKey(mv.rank, int32(i)), mv.newID, syms[i].id, syms[i+1].id})
		}
	}
	h.heapify()
	for len(h) > 0 {
		top := h.pop()
		pos := top.pos()
		cur := &syms[pos]
		if cur.removed || cur.next == -1 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		// An entry is stale unless the pair there still merges into the
		// same token (the reference's test). An unchanged pair trivially
		// does, which saves the lookup.
		if cur.id != top.left || right.id != top.right {
			mv, ok := t.get(cur.id, right.id)
			if !ok || mv.newID != top.newID {
				continue
			}
		}
		cur.id = top.newID
		cur.next = right.next
		syms[nextPos].removed = true
		if right.next >= 0 {
			syms[right.next].prev = pos
		}
		if cur.prev >= 0 {
			p := syms[cur.prev].id
			if mv, ok := t.get(p, cur.id); ok {
				h.push(mergeItem{itemKey(mv.rank, cur.prev), mv.newID, p, cur.id})
			}
		}
		if cur.next >= 0 {
			n := syms[cur.next].id
			if mv, ok := t.get(cur.id, n); ok {
				h.push(mergeItem{itemKey(mv.rank, pos), mv.newID, cur.id, n})
			}
		}
	}
	sc.heap = h
}
