// Package wait is the e2e suites' one polling helper: tests wait for the cluster or a node to
// reach a state and, on timeout, fail with what they last saw rather than only "timed out".
package wait

import (
	"testing"
	"time"
)

// Eventually polls cond every 200 ms until it returns true or timeout passes. On timeout the
// test fails with what was expected, the last state cond described and, when diag is not nil,
// diag's wider view (pods, labels, log tails).
func Eventually(t testing.TB, timeout time.Duration, what string, diag func() string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			d := ""
			if diag != nil {
				d = "\n" + diag()
			}
			t.Fatalf("%s: not reached after %s; last state: %s%s", what, timeout, last, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
