package freeport

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNeverTheSamePortTwice: many addresses in a row are all distinct and
// can be listened on.
func TestNeverTheSamePortTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 500 {
		a := Addr(t)
		assert.False(t, seen[a], "%s handed out twice", a)
		seen[a] = true
	}
	ln, err := net.Listen("tcp", Addr(t))
	require.NoError(t, err)
	require.NoError(t, ln.Close())
}
