// Package randid makes the random identifiers the plugins put in Redis:
// lock owners, load-guard tokens, sliding-log members, consumer names.
package randid

import (
	"crypto/rand"
	"encoding/hex"
)

// Hex returns n random bytes, hex-encoded (2n characters).
func Hex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b)
}
