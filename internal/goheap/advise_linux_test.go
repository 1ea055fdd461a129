//go:build linux

package goheap

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vmFlags are the VmFlags of the mapping of this process that holds addr
// (/proc/self/smaps).
func vmFlags(t *testing.T, addr uintptr) []string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	inside := false
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") {
			inside = lo <= addr && addr < hi
			continue
		}
		if inside && strings.HasPrefix(line, "VmFlags:") {
			return strings.Fields(strings.TrimPrefix(line, "VmFlags:"))
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("no mapping holds %#x", addr)
	return nil
}

func TestAdviseMarksTheHeapsPagesForHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("this kernel has no transparent huge pages")
	}
	beg, end, err := advise(16 << 20)
	require.NoError(t, err)
	require.Less(t, beg, end, "16 MiB hold whole huge pages")
	assert.Zero(t, beg%hugePage, "the advice starts on a huge page")
	assert.LessOrEqual(t, int(end-beg), 16<<20)
	// "hg": the mapping is advised MADV_HUGEPAGE. The heap's other pages
	// are not, so this fails without the advice.
	assert.Contains(t, vmFlags(t, beg), "hg")
	assert.Contains(t, vmFlags(t, end-1), "hg")
}

func TestAdviseHugePagesRunsOnce(t *testing.T) {
	require.NoError(t, AdviseHugePages(4<<20))
	require.NoError(t, AdviseHugePages(4<<20))
}
