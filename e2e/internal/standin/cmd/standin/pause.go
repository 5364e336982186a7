package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// pause is the sandbox container: PID 1 of the pod, holding its namespaces. It reaps the
// children it inherits (a shared PID namespace makes it their parent) and exits 0 on
// SIGTERM or SIGINT, as registry.k8s.io/pause does.
func pause(args []string) int {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	// Once the handlers are in place, so a test knows a SIGTERM from now on is caught.
	fmt.Fprintln(os.Stderr, layout.PauseReady)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return 0
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
	return 0
}
