// Package idhash makes the stable ids of alerts: the hex of the first 16
// bytes of the SHA-256 of their parts, each followed by a zero byte (so
// that no two lists of parts run together into the same bytes).
package idhash

import (
	"crypto/sha256"
	"encoding/hex"
)

// Of is the id of parts.
func Of(parts ...string) string {
	h := sha256.New()
	for _, s := range parts {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
