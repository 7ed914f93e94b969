package provider

import (
	"crypto/rand"
	"encoding/hex"
)

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("provider: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}
