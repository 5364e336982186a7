package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/migmanager"
	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
)

func migFlags(fs *flag.FlagSet) func(context.Context, *env) error {
	cfgPath, node, kubeconfig, hostRoot := configFlag(fs), nodeFlag(fs), kubeconfigFlag(fs), hostRootFlag(fs)
	openNVML := mockFlags(fs)
	dir := fs.String("mig-config-dir", config.MIGConfigDir, "directory of the pools' MIG layouts (ConfigMap "+config.MIGConfigMap+", one <pool>.yaml each)")
	socket := fs.String("pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's pod-resources socket: GPUs that pods hold are never repartitioned (\"\": assume none is held, for tests only)")
	interval := fs.Duration("interval", 0, "resync interval (default: the config's interval, else 30s); a change of this Node's labels is acted on at once")
	timeout := fs.Duration("timeout", migmanager.DefaultTimeout, "how long a layout may stay pending (gates open, GPUs held) before the state turns failed with the reason")
	once := fs.Bool("once", false, "reconcile once and exit (exit 1 unless the state is success)")
	return func(ctx context.Context, e *env) error {
		cfg, err := config.LoadAgent(*cfgPath)
		if err != nil {
			return err
		}
		if *node == "" {
			return nodeapi.ErrNoNodeName
		}
		client, err := nodeapi.NewClient(*kubeconfig)
		if err != nil {
			return err
		}
		lib, err := openNVML(false)
		if err != nil {
			return err
		}
		defer lib.Shutdown()
		m := &migmanager.Manager{Client: client, Node: *node, Config: cfg, ConfigDir: *dir, Lib: lib, Timeout: *timeout,
			HostRoot: *hostRoot, Logger: e.log}
		if *socket != "" {
			pr, err := podresources.New(podresources.Config{Socket: *socket, Refresh: time.Minute, Logger: e.log})
			if err != nil {
				return err
			}
			defer pr.Close()
			m.Holders = migmanager.PodResourceHolders(lib, pr)
		}
		if *once {
			out, err := m.Reconcile(ctx)
			if err != nil {
				return err
			}
			e.log.Info("MIG", "node", *node, "stage", config.StageMIGManager, "state", out.State, "layout", out.Layout, "message", out.Message)
			if out.State != config.MIGStateSuccess && out.State != "" {
				return fmt.Errorf("MIG state %s: %s", out.State, out.Message)
			}
			return nil
		}
		d := *interval
		if d == 0 {
			if d, err = config.AgentInterval(cfg); err != nil {
				return err
			}
		}
		e.log.Info("MIG step started", "node", *node, "stage", config.StageMIGManager, "interval", d.String())
		return m.Run(ctx, d)
	}
}
