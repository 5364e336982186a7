// Command gpu-device-plugin advertises a node's NVIDIA GPUs (whole, MIG, time-sliced) to the
// kubelet over deviceplugin/v1beta1. See `gpu-device-plugin --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
