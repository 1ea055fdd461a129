package goheap

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Refusal gives a log line what the first AdviseHugePages call returned,
// as later calls do.
func TestRefusalIsTheFirstCallsResult(t *testing.T) {
	first := AdviseHugePages(4 << 20)
	assert.Equal(t, first, Refusal())
	assert.Equal(t, first, AdviseHugePages(8<<20), "a later call")
}
