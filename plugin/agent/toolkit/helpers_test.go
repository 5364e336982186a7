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

// installedNoCRI: Install did everything but verify, because no containerd serves the CRI
// socket (tests of the files alone run no daemon).
func installedNoCRI(res Result) bool {
	return !res.Verified && strings.Contains(res.Reason, "cannot reach containerd's CRI") && res.Status.Reason == res.Reason
}
