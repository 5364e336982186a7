package realnode

import (
	"bufio"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestLockWaitsForAnotherRun: while another process holds LockFile, lockMachine waits, and it
// gets the lock once that process is gone; meanwhile nobody else can take it.
func TestLockWaitsForAnotherRun(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("util-linux flock not installed")
	}
	// The other run: holds the lock until its stdin closes.
	other := exec.Command("flock", LockFile, "-c", "echo held; cat >/dev/null")
	stdin, err := other.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("the other run did not take the lock: %q %v", line, err)
	}
	got := make(chan *os.File, 1)
	go func() {
		f, err := lockMachine("lock-test")
		if err != nil {
			t.Error(err)
		}
		got <- f
	}()
	select {
	case f := <-got:
		f.Close()
		t.Fatal("lockMachine returned while another process held the lock")
	default:
	}
	stdin.Close() // the other run ends
	if err := other.Wait(); err != nil {
		t.Fatal(err)
	}
	f := <-got
	if f == nil {
		t.Fatal("no lock")
	}
	defer f.Close()
	probe, err := os.Open(LockFile)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := syscall.Flock(int(probe.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Fatal("the lock is not held after lockMachine returned")
	}
}
