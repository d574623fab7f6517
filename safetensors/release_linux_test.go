package safetensors

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
)

// mappedRSS is the resident size in KiB of this process's mapping of path
// (from /proc/self/smaps).
func mappedRSS(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, total := false, 0
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasSuffix(line, path)
			continue
		}
		var kb int
		if in && strings.HasPrefix(line, "Rss:") {
			fmt.Sscanf(strings.TrimPrefix(line, "Rss:"), "%d", &kb)
			total += kb
		}
	}
	return total
}

// TestCheckFiniteDropsPages scans a 24 MB bf16 tensor whose pages are all
// resident and checks that the scan leaves almost none of them resident,
// that the data still reads back, and that a NaN in the last chunk is
// still found.
func TestCheckFiniteDropsPages(t *testing.T) {
	const n = 12 << 20
	data := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(data[2*i:], uint16(0x3c00+i%0x300))
	}
	header := fmt.Sprintf(`{"w":{"dtype":"BF16","shape":[%d],"data_offsets":[0,%d]}}`, n, 2*n)
	dir := t.TempDir()
	for _, nan := range []bool{false, true} {
		if nan {
			binary.LittleEndian.PutUint16(data[2*(n-3):], 0x7fc0)
		}
		p := writeTemp(t, dir, fmt.Sprintf("w%v.safetensors", nan), file(header, data))
		f, err := OpenFile(p)
		if err != nil {
			t.Fatal(err)
		}
		_, raw, _ := f.Raw("w")
		var sum int
		for i := 0; i < len(raw); i += 512 {
			sum += int(raw[i])
		}
		before := mappedRSS(t, p)
		err = f.CheckFinite("w")
		after := mappedRSS(t, p)
		if nan != (err != nil) || nan && !strings.Contains(err.Error(), fmt.Sprintf("NaN at flat index %d", n-3)) {
			t.Errorf("NaN %v: CheckFinite: %v", nan, err)
		}
		if before < 20<<10 || after > 64 {
			t.Errorf("resident mapping %d KiB before the scan, %d KiB after; want >= 20 MiB, then <= 64 KiB", before, after)
		}
		again := 0
		for i := 0; i < len(raw); i += 512 {
			again += int(raw[i])
		}
		if again != sum {
			t.Errorf("data read back after the scan differs")
		}
		f.Close()
	}
}
