// Command gpu-node-agent is the gpupolicy node agent (see plugin/agent/cli and --help).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpupolicy/gpupolicy/plugin/agent/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
