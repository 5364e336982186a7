package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/commonflags"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// command is what the device plugin and its dra mode share: the flags for the config, host
// root, NVML mock, probe interval and node name (plus the common ones), their checks, and the
// logger and config they start with.
type command struct {
	name                                 string // in messages: "gpu-device-plugin" or "gpu-device-plugin dra"
	fs                                   *flag.FlagSet
	configFile, hostRoot, mock, nodeName *string
	probe                                *time.Duration
	common                               *commonflags.Flags
}

// commandHelp are a mode's manual and the help of the shared flags that differ between modes.
type commandHelp struct{ usage, config, hostRoot, probe, nodeName string }

func newCommand(name string, h commandHelp, stderr io.Writer) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &command{name: name, fs: fs,
		configFile: fs.String("config", "", h.config),
		hostRoot:   fs.String("host-root", "/", h.hostRoot),
		mock:       fs.String("nvml-mock", "", "use a mock NVML instead of libnvidia-ml.so.1, for demos and tests only (known: "+strings.Join(gpumock.Names(), ", ")+")"),
		probe:      fs.Duration("probe-interval", 5*time.Second, h.probe),
		nodeName:   fs.String("node-name", os.Getenv("NODE_NAME"), h.nodeName),
		common:     commonflags.Register(fs),
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, h.usage)
		fs.PrintDefaults()
	}
	return c
}

// parse reads args and checks them: --help and --version answer and stop, stray arguments,
// relative paths (host-root and the mode's absolute flags) and an out-of-range probe interval
// are usage errors. done means exit with code.
func (c *command) parse(args []string, stdout, stderr io.Writer, absolute ...string) (code int, done bool) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	if c.common.PrintVersion(stdout, "gpu-device-plugin") {
		return 0, true
	}
	if c.fs.NArg() > 0 {
		return c.usage(stderr, fmt.Errorf("unexpected arguments %q", c.fs.Args())), true
	}
	if err := commonflags.CheckAbsolutePaths(c.fs, append(absolute, "host-root")...); err != nil {
		return c.usage(stderr, err), true
	}
	if err := config.CheckInterval("probe-interval", *c.probe, config.MinProbeInterval, config.MaxProbeInterval, 5*time.Second); err != nil {
		return c.usage(stderr, err), true
	}
	return 0, false
}

func (c *command) usage(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", c.name, err)
	return 2
}

// start makes the logger (node and stage in every line, gRPC's routed into it) and loads the
// config (the GPUPolicy defaults without --config). done means exit with code.
func (c *command) start(stderr io.Writer, attrs ...any) (log *slog.Logger, cfg config.DevicePlugin, code int, done bool) {
	base, err := c.common.Logger(stderr)
	if err != nil {
		return nil, cfg, c.usage(stderr, err), true
	}
	log = base.With(append([]any{"node", *c.nodeName, "stage", config.StageDevicePlugin}, attrs...)...)
	routeGRPCLogs(log)
	cfg = config.DefaultDevicePlugin()
	if *c.configFile != "" {
		if cfg, err = config.LoadDevicePlugin(*c.configFile); err != nil {
			log.Error("cannot load config", "error", err)
			return log, cfg, 1, true
		}
	}
	return log, cfg, 0, false
}
