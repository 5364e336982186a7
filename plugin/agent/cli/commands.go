package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/plugin/agent/driver"
	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/agent/labels"
	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/agent/stages"
	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", config.AgentConfigPath, "agent config rendered by gpupolicy-fn (ConfigMap "+config.AgentConfigMap+")")
}

func gateFlags(fs *flag.FlagSet) func(context.Context, *env) error {
	cfgPath, hostRoot, node, kubeconfig := configFlag(fs), hostRootFlag(fs), nodeFlag(fs), kubeconfigFlag(fs)
	interval := fs.Duration("interval", 0, "resync interval: every stage is re-validated at least this often; changes on the node and to its Node's labels are acted on at once (default: the config's interval, else 30s)")
	once := fs.Bool("once", false, "reconcile once and exit (exit 1 when a stage is not ready)")
	return func(ctx context.Context, e *env) error {
		// Configuration mistakes first: they are the likelier ones and name the field to fix.
		if _, err := config.LoadAgent(*cfgPath); err != nil {
			return err
		}
		if *node == "" {
			return nodeapi.ErrNoNodeName
		}
		client, err := nodeapi.NewClient(*kubeconfig)
		if err != nil {
			return err
		}
		for {
			raw, err := os.ReadFile(*cfgPath)
			if err != nil {
				return fmt.Errorf("agent config: %w", err)
			}
			cfg, err := config.LoadAgent(*cfgPath)
			if err != nil {
				return err
			}
			r := &gate.Reconciler{Client: client, Node: *node, Checks: stages.Checks(cfg), Logger: e.log,
				ReadHost: func() hostfacts.Facts { return hostfacts.Read(*hostRoot) }}
			if *once {
				return gateOnce(ctx, r, e)
			}
			d := *interval
			if d == 0 {
				if d, err = config.AgentInterval(cfg); err != nil {
					return err
				}
			}
			e.log.Info("gate started", "node", *node, "stage", "gate", "interval", d.String())
			runCtx, cancel := context.WithCancel(ctx)
			reload := wake.New()
			r.Wake = gateWatches(runCtx, e.log.With("node", *node, "stage", "gate"), client, *node, *hostRoot, *cfgPath, reload, d)
			// A new policy (new drop-in digest, stages switched on or off) reaches the pod as an
			// updated ConfigMap file: restart the loop with checks built from it.
			go cancelOnChange(runCtx, cancel, *cfgPath, raw, reload, d)
			err = r.Run(runCtx, d)
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, context.Canceled) {
				return err
			}
			e.log.Info("agent config changed; reloading", "node", *node, "stage", "gate")
		}
	}
}

// gateWatches starts what wakes the gate before its interval, until ctx ends: inotify on the
// host directories the checks read, the kernel's NVIDIA module uevents, and a watch of this
// Node (a person's opt-out or re-enable). The same inotify instance pokes reload
// when the agent config's directory changes (the kubelet updates a ConfigMap volume by
// swapping its ..data link; a plain file is rewritten in place). A watch that cannot start is
// a warning: the interval then carries its changes.
func gateWatches(ctx context.Context, log *slog.Logger, client kubernetes.Interface, node, hostRoot, cfgPath string, reload *wake.Trigger, interval time.Duration) *wake.Trigger {
	t := wake.New()
	dirs := append(stages.WatchDirs(), configDir(cfgPath, reload))
	if err := t.Files(ctx, log, hostRoot, dirs...); err != nil {
		log.Warn("host and config changes are seen only at the interval", "error", err, "interval", interval.String())
	}
	stages.DriverEvents(ctx, log, t, hostRoot)
	go t.Node(ctx, log, client, node, interval)
	return t
}

// driverWatches starts what wakes the driver validator before its interval, until ctx ends:
// the gate's host sources (inotify on the checked directories, the kernel's NVIDIA module
// uevents), without the Node and config watches that only the gate needs.
func driverWatches(ctx context.Context, log *slog.Logger, hostRoot string, interval time.Duration) *wake.Trigger {
	t := wake.New()
	if err := t.Files(ctx, log, hostRoot, stages.WatchDirs()...); err != nil {
		log.Warn("host changes are seen only at the interval", "error", err, "interval", interval.String())
	}
	stages.DriverEvents(ctx, log, t, hostRoot)
	return t
}

// configDir is the agent config's directory, a path of this container, poking reload.
func configDir(path string, reload *wake.Trigger) wake.Dir {
	return wake.Dir{Path: filepath.Dir(path), Local: true, Names: []string{"..data", filepath.Base(path)}, Why: "agent config changed", To: reload}
}

// cancelOnChange cancels when path's bytes differ from was, looking on every wake-up of
// changed and every resync period.
func cancelOnChange(ctx context.Context, cancel context.CancelFunc, path string, was []byte, changed *wake.Trigger, resync time.Duration) {
	for {
		timer := time.NewTimer(resync)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-changed.C():
			timer.Stop()
		}
		changed.Take()
		if now, err := os.ReadFile(path); err == nil && !bytes.Equal(now, was) {
			cancel()
			return
		}
	}
}

func gateOnce(ctx context.Context, r *gate.Reconciler, e *env) error {
	st, err := r.Reconcile(ctx)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(e.stdout).Encode(st); err != nil {
		return err
	}
	for stage, s := range st {
		if !s.Ready && stage != stages.StageDisabled {
			return fmt.Errorf("stage %s not ready: %s", stage, s.Reason)
		}
	}
	return nil
}

// mockFlags registers --nvml-mock and the mock's versions; open returns NVML (nil, nil
// when the real library is absent and optional is true).
func mockFlags(fs *flag.FlagSet) func(optional bool) (nvml.Interface, error) {
	mock := fs.String("nvml-mock", "", "demos and tests only: use the named NVML mock ("+strings.Join(gpumock.Names(), ", ")+") instead of libnvidia-ml.so.1")
	drv := fs.String("mock-driver-version", "", "with --nvml-mock: the driver version the mock reports (default: the mock's own, 550.54.15)")
	cuda := fs.String("mock-cuda-version", "", "with --nvml-mock: the CUDA driver version the mock reports, MAJOR.MINOR (default: the mock's own, 12.4)")
	return func(optional bool) (nvml.Interface, error) {
		var c int
		if *cuda != "" {
			var err error
			if c, err = gpulib.ParseCUDAVersion(*cuda); err != nil {
				return nil, fmt.Errorf("--mock-cuda-version: %w", err)
			}
		}
		lib, err := gpulib.Open(*mock, gpumock.WithDriverVersion(*drv), gpumock.WithCUDADriverVersion(c))
		if optional && (errors.Is(err, gpulib.ErrLibraryNotFound) || errors.Is(err, gpulib.ErrDriverNotLoaded)) {
			return nil, nil
		}
		return lib, err
	}
}

func driverFlags(fs *flag.FlagSet) func(context.Context, *env) error {
	cfgPath, hostRoot, node, kubeconfig := configFlag(fs), hostRootFlag(fs), nodeFlag(fs), kubeconfigFlag(fs)
	openNVML := mockFlags(fs)
	watch := fs.Bool("watch", false, "keep checking and serve readiness on --listen (the gpu-driver validator DaemonSet): again at once when the NVIDIA kernel module is loaded or unloaded, its device nodes or the toolkit status change, and every --interval as a resync")
	interval := fs.Duration("interval", time.Minute, "with --watch: the resync, the longest time between checks")
	pool := fs.String("pool", "", "check against this node pool's own driver (the pool's DaemonSet "+config.DriverDaemonSetName+"-<pool>); default: the policy's driver")
	listen := fs.String("listen", ":8081", "with --watch: address of the readiness endpoint; GET /readyz (and /healthz) is 503 until the first check completed, then 200 with the verdict as the body whatever it is (the verdict about the node is the gate's labels and GPUStackReady condition, so one bad node never keeps the driver DaemonSet unavailable)")
	return func(ctx context.Context, e *env) error {
		cfg, err := config.LoadAgent(*cfgPath)
		if err != nil {
			return err
		}
		want := cfg.Driver
		if *pool != "" {
			np := cfg.PoolNamed(*pool)
			if np == nil || np.Driver == nil {
				return fmt.Errorf("--pool %s: the agent config has no node pool %q with its own driver (spec.nodePools[].driver); re-render with gpupolicy-fn", *pool, *pool)
			}
			want = *np.Driver
		}
		log := e.log.With("node", *node, "stage", config.StageDriver)
		var publish func(context.Context, driver.Verdict) error
		if *node != "" {
			client, err := nodeapi.NewClient(*kubeconfig)
			if err != nil {
				return err
			}
			publish = func(ctx context.Context, v driver.Verdict) error { return driver.Publish(ctx, client, *node, v, log) }
		}
		check := func(ctx context.Context) (driver.Verdict, error) {
			module, err := hostfacts.ReadKernelModule(*hostRoot)
			if err != nil {
				return driver.Verdict{Reason: err.Error()}, err
			}
			found := module.Version
			var nv *driver.NVMLVersions
			lib, err := openNVML(true)
			if err != nil {
				return driver.Verdict{Reason: err.Error()}, err
			}
			if lib != nil {
				defer lib.Shutdown()
				q, err := driver.QueryNVML(lib)
				if err != nil {
					return driver.Verdict{Reason: err.Error()}, err
				}
				nv = &q
			} else {
				log.Debug("NVML not available (before the toolkit stage): kernel module version only")
			}
			v := driver.Compare(want, cfg.CUDAVersion, found, nv)
			v.CheckModules(want, module.Type)
			log.Info("driver checked", "expected", v.Expected, "found", v.Found, "modules", v.Modules, "enforce", v.Enforce, "drift", v.Drift, "satisfied", v.Satisfied, "reason", v.Reason)
			if publish != nil {
				if err := publish(ctx, v); err != nil {
					return v, err
				}
			}
			return v, nil
		}
		if !*watch {
			v, err := check(ctx)
			if err != nil {
				return err
			}
			if err := json.NewEncoder(e.stdout).Encode(v); err != nil {
				return err
			}
			if !v.Satisfied {
				return fmt.Errorf("driver does not satisfy the policy: %s", v.Reason)
			}
			return nil
		}
		var health driver.Health
		if err := serveHealth(ctx, *listen, &health); err != nil {
			return err
		}
		return everyOrWoken(ctx, *interval, driverWatches(ctx, log, *hostRoot, *interval), log, func(ctx context.Context) error {
			v, err := check(ctx)
			health.Set(driver.ValidatorReadiness(v))
			return err
		})
	}
}

// serveHealth serves h on /readyz and /healthz until ctx ends.
func serveHealth(ctx context.Context, addr string, h http.Handler) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/readyz", h)
	mux.Handle("/healthz", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}

func labelsFlags(fs *flag.FlagSet) func(context.Context, *env) error {
	cfgPath, node, kubeconfig := configFlag(fs), nodeFlag(fs), kubeconfigFlag(fs)
	openNVML := mockFlags(fs)
	interval := fs.Duration("interval", 0, "relabel every interval (0: once and exit)")
	sysfs := fs.String("sysfs", labels.DefaultSysfs, "where sysfs is mounted: the DMI product name (gpu.machine), the GPUs' PCI class (gpu.mode) and PCI config space (vgpu.*) are read there")
	return func(ctx context.Context, e *env) error {
		cfg, err := config.LoadAgent(*cfgPath)
		if err != nil {
			return err
		}
		log := e.log.With("node", *node, "stage", config.StageFeatureDiscovery)
		lib, err := openNVML(false)
		if err != nil {
			return err
		}
		defer lib.Shutdown()
		if *node == "" { // no API: print the labels (a dry run on a host)
			l, err := labels.FromNVML(lib, cfg.PoolFor(nil), *sysfs)
			if err != nil {
				return err
			}
			return printLabels(e, l)
		}
		client, err := nodeapi.NewClient(*kubeconfig)
		if err != nil {
			return err
		}
		return every(ctx, *interval, log, func(ctx context.Context) error {
			var computeErr error
			_, err := nodeapi.Converge(ctx, client, *node, func(n *corev1.Node) []nodeapi.Change {
				l, err := labels.FromNVML(lib, cfg.PoolFor(n.Labels), *sysfs)
				if err != nil {
					computeErr = err
					return nil
				}
				if c := nodeapi.Diff(n, labels.WithRemovals(n.Labels, l), nil); !c.Empty() {
					log.Info("feature labels changed", "labels", len(c.Labels))
					return []nodeapi.Change{c}
				}
				return nil
			})
			return errors.Join(computeErr, err)
		})
	}
}

func printLabels(e *env, l map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(l)) {
		if _, err := fmt.Fprintf(e.stdout, "%s=%s\n", k, l[k]); err != nil {
			return err
		}
	}
	return nil
}
