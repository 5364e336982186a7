package realnode

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// LockFile serialises real nodes across processes: the kubelet's device-plugin directory, the
// CNI bridge name, the iptables rules and the /etc/hosts line are per machine, so two real-node
// runs at once (two test binaries, two worktrees) would break each other.
const LockFile = "/run/lock/gpupolicy-realnode.lock"

// lockMachine takes LockFile exclusively, blocking while another process holds it (and saying
// so, so a waiting run is not mistaken for a hung one). The lock goes with the returned file:
// closing it, or the process ending however it ends, releases it.
func lockMachine(node string) (*os.File, error) {
	f, err := os.OpenFile(LockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("real-node lock %s: %w", LockFile, err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		holder, _ := os.ReadFile(LockFile)
		start := time.Now()
		fmt.Fprintf(os.Stderr, "realnode %s: waiting for %s, held by another real-node run (it was last taken by: %s)\n", node, LockFile, holder)
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err == nil {
			fmt.Fprintf(os.Stderr, "realnode %s: got %s after %s\n", node, LockFile, time.Since(start).Round(time.Second))
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("real-node lock %s: %w", LockFile, err)
	}
	// Who holds it, for the next waiter's log line.
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "pid %d, node %s, since %s", os.Getpid(), node, time.Now().UTC().Format(time.RFC3339))
	}
	return f, nil
}
