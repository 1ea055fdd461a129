package simulate

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrentRuns: runs share only read-only scenario data, so parallel
// runs give what sequential runs give.
func TestConcurrentRuns(t *testing.T) {
	opts := []Options{
		{Scenario: "small", Seed: 1, Count: 3000, Now: testNow},
		{Scenario: "loops", Seed: 2, Count: 3000, Now: testNow},
		{Scenario: "proxmox", Seed: 3, Count: 3000, Now: testNow},
	}
	got := make([]string, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _, errs[i] = digestOf(o)
		}()
	}
	wg.Wait()
	want := make([]string, len(opts))
	for i, o := range opts {
		require.NoError(t, errs[i])
		want[i], _ = digest(t, o)
	}
	assert.Equal(t, want, got)
}
