package idhash

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The ids stored before this package (alerts, regressions) stay the same:
// the parts each followed by a zero byte, SHA-256, the first 16 bytes in
// hex; parts that run together differently give other ids.
func TestOfKeepsTheStoredIDs(t *testing.T) {
	sum := sha256.Sum256([]byte("a\x00bc\x00"))
	assert.Equal(t, hex.EncodeToString(sum[:16]), Of("a", "bc"))
	assert.NotEqual(t, Of("a", "bc"), Of("ab", "c"))
	assert.Len(t, Of(), 32)
}
