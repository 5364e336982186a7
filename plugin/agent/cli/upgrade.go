package cli

import (
	"context"
	"errors"
	"flag"
	"os"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/agent/upgrade"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

func upgradeFlags(fs *flag.FlagSet) func(context.Context, *env) error {
	cfgPath, node, kubeconfig := configFlag(fs), nodeFlag(fs), kubeconfigFlag(fs)
	namespace := fs.String("namespace", os.Getenv("POD_NAMESPACE"), "the policy's namespace: its driver DaemonSets and the upgrade slot Leases (default: env POD_NAMESPACE from the downward API)")
	interval := fs.Duration("interval", 30*time.Second, "time between passes; a change of this Node, of a pod on it, of a driver DaemonSet or of an upgrade slot is acted on at once")
	lease := fs.Duration("lease-duration", config.DefaultUpgradeLeaseDuration, "how long a slot held by an agent that stopped renewing it stays taken")
	validation := fs.Duration("validation-timeout", upgrade.DefaultValidationTimeout, "how long validation-required may last before the node is marked upgrade-failed (it stays cordoned)")
	once := fs.Bool("once", false, "run one pass, print the state and exit")
	return func(ctx context.Context, e *env) error {
		cfg, err := config.LoadAgent(*cfgPath)
		if err != nil {
			return err
		}
		if *node == "" {
			return nodeapi.ErrNoNodeName
		}
		if *namespace == "" {
			return errors.New("namespace unknown: set env POD_NAMESPACE from the downward API (fieldRef metadata.namespace) or pass --namespace")
		}
		client, err := nodeapi.NewClient(*kubeconfig)
		if err != nil {
			return err
		}
		u := &upgrade.Upgrader{Client: client, Node: *node, Namespace: *namespace, Config: cfg, Logger: e.log,
			LeaseDuration: *lease, ValidationTimeout: *validation,
			Reload: func() (*config.Agent, error) { return config.LoadAgent(*cfgPath) }}
		if *once {
			out, err := u.Reconcile(ctx)
			if err != nil {
				return err
			}
			e.log.Info("driver upgrade", "node", *node, "stage", upgrade.Component, "state", out.State, "message", out.Message)
			return nil
		}
		e.log.Info("driver upgrade step started", "node", *node, "stage", upgrade.Component, "interval", interval.String())
		return u.Run(ctx, *interval)
	}
}
