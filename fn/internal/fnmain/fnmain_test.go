package fnmain

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// sink keeps the garbage TestOneShotGCFollowsTheLiveHeap allocates from being optimised away.
var sink []byte

// TestOneShotGCFollowsTheLiveHeap: past oneShotHeap the memory limit follows the live heap
// (twice it). With the limit kept at 64 MiB, a live heap near it made every allocation collect
// (30,000 nodeSelector labels: 3.9 s against 1.3 s with GOGC=100).
func TestOneShotGCFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, ok := os.LookupEnv(env); ok {
			defer os.Setenv(env, v)
			os.Unsetenv(env)
		}
	}
	oneShotGC()
	var keep [][]byte
	for range 2 * oneShotHeap >> 20 { // 128 MiB live
		keep = append(keep, make([]byte, 1<<20))
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		// Keep allocating, as a render does: a collection comes when the heap reaches the
		// limit. Without it, a limit retuned just above the kept 128 MiB (a collection that
		// ran at 70 MiB live) was never reached again and the test waited for nothing.
		sink = make([]byte, 1<<20)
		runtime.Gosched()
		if limit := debug.SetMemoryLimit(-1); limit >= 3*oneShotHeap {
			runtime.KeepAlive(keep)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the memory limit is %d MiB with %d MiB live; want at least twice the live heap", debug.SetMemoryLimit(-1)>>20, len(keep))
}
