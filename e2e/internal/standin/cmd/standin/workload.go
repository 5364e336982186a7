package main

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
)

// workload is the test workload: it prints its environment, sorted, one variable a line
// after layout.EnvPrefix (so a test greps "standin-env: NVIDIA_VISIBLE_DEVICES="), then
// prints layout.WorkloadReady and runs until SIGTERM or SIGINT. What a GPU container is given — NVIDIA_VISIBLE_DEVICES from
// the device plugin, layout.CDIDeviceEnv from a CDI device — shows in its log.
func workload(args []string) int {
	// Registered before printing: a test that stops the container once it has read the
	// output must not find the default disposition (PID 1 ignores SIGTERM).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	env := slices.Sorted(slices.Values(os.Environ()))
	for _, kv := range env {
		fmt.Println(layout.EnvPrefix + kv)
	}
	fmt.Println(layout.WorkloadReady)
	<-sig
	return 0
}
