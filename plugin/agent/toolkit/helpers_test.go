package toolkit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
