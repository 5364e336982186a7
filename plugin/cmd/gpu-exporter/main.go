// Command gpu-exporter serves NVIDIA GPU metrics for Prometheus (see plugin/exporter).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
