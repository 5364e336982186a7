package mps

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
)

// tailer copies the lines the MPS control daemon appends to its control.log into this
// program's log (NVIDIA's daemon runs tail -f for the same purpose), so `kubectl logs` of the
// pod shows the clients and servers it started.
type tailer struct{ done chan struct{} }

func startTailer(log *slog.Logger, file string) *tailer {
	t := &tailer{done: make(chan struct{})}
	go func() {
		var off int64
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			off = copyLines(log, file, off)
			select {
			case <-t.done:
				copyLines(log, file, off)
				return
			case <-tick.C:
			}
		}
	}()
	return t
}

// copyLines logs the complete lines of file after off and returns the offset after them; a
// file shorter than off was rotated and is read from its start.
func copyLines(log *slog.Logger, file string, off int64) int64 {
	f, err := os.Open(file)
	if err != nil {
		return off
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() < off {
		off = 0
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return off
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return off // a partial line waits for its end
		}
		off += int64(len(line))
		log.Info("mps control", "log", strings.TrimRight(line, "\n"))
	}
}

func (t *tailer) stop() {
	if t != nil {
		close(t.done)
	}
}
