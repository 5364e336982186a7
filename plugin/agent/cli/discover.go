package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/discover"
	"github.com/gpupolicy/gpupolicy/plugin/agent/driver"
	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

func discoverFlags(fs *flag.FlagSet) func(context.Context, *env) error {
	hostRoot, node, kubeconfig := hostRootFlag(fs), nodeFlag(fs), kubeconfigFlag(fs)
	interval := fs.Duration("interval", time.Minute, "time between scans of the PCI bus (0: once and exit)")
	listen := fs.String("listen", ":8082", "address of the readiness endpoint; GET /readyz (and /healthz) is 200 while the last pass read sysfs and reached the API server, on CPU nodes too")
	return func(ctx context.Context, e *env) error {
		if *node == "" { // no API: print what the bus shows (a dry run on a host)
			gpus, err := discover.Scan(*hostRoot)
			if err != nil {
				return err
			}
			return json.NewEncoder(e.stdout).Encode(gpus)
		}
		client, err := nodeapi.NewClient(*kubeconfig)
		if err != nil {
			return err
		}
		log := e.log.With("node", *node, "stage", discover.Component)
		r := &discover.Reconciler{Client: client, Node: *node, HostRoot: *hostRoot, Log: e.log}
		var health driver.Health
		if *interval > 0 {
			if err := serveHealth(ctx, *listen, &health); err != nil {
				return err
			}
		}
		return every(ctx, *interval, log, func(ctx context.Context) error {
			res, err := r.Reconcile(ctx)
			if err != nil {
				health.Set(false, err.Error())
				return err
			}
			health.Set(true, fmt.Sprintf("%d NVIDIA GPU(s) on the PCI bus, %s=%q", len(res.GPUs), config.LabelGPUPresent, res.Label))
			return nil
		})
	}
}
