// Package cli is gpu-node-agent's command line: one flag set per subcommand, each wiring
// flags to the agent packages. main only calls Main.
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/agent/toolkit"
	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
	"github.com/gpupolicy/gpupolicy/plugin/commonflags"
)

// command is one subcommand: its flag set is built fresh per use (help and run share it).
type command struct {
	name    string
	summary string
	flags   func(fs *flag.FlagSet) func(ctx context.Context, env *env) error
}

// env is what every subcommand gets besides its flags.
type env struct {
	stdout, stderr io.Writer
	log            *slog.Logger
	args           []string // positional arguments left after flags
}

func commands() []command {
	return []command{
		{"gate", "re-validate every stage on this node when it changes (status file, device nodes, driver version, its Node's labels) and each interval, open/close its nvidia.com/gpu.deploy.* labels and keep its GPUStackReady Node condition", gateFlags},
		{"driver", "check the node's NVIDIA driver against the policy; label version and drift (--watch: validator with readiness)", driverFlags},
		{"toolkit install", "install the rendered containerd drop-in (merge, import, atomic write, restart, CDI spec with --cdi-spec, verify, status file)", toolkitInstallFlags},
		{"toolkit uninstall", "remove the drop-in and the status file, restart containerd per --restart-mode", toolkitUninstallFlags},
		{"discover", "scan the PCI bus for NVIDIA GPUs every --interval and set nvidia.com/gpu.present=true on this node when one is there (never over a person's value; a lost GPU is a GPULost Warning Event, the label stays); without --node/NODE_NAME print the GPUs found", discoverFlags},
		{"mig", "apply the node's MIG layout (its nvidia.com/mig.config label, else its pool's) through NVML once the downstream gates are closed; report nvidia.com/mig.config.state (pending | rebooting | success | failed)", migFlags},
		{"upgrade", "this node's part of a rolling driver upgrade (driver.source container): take a slot Lease of its pool, cordon, wait for jobs, evict GPU pods (PodDisruptionBudgets respected), delete its outdated driver pod, validate, uncordon; state in nvidia.com/gpu-driver-upgrade-state. For a preinstalled driver under onDrift: taint, keep the nvidia.com/gpu.driver-drift:NoSchedule taint on a drifted node", upgradeFlags},
		{"labels", "label the node with gpu-feature-discovery's GPU feature labels from NVML", labelsFlags},
	}
}

const usageHead = `gpu-node-agent: the gpupolicy node agent. It verifies each GPU stage on its own node and opens
the next nvidia.com/gpu.deploy.* label only then, installs the reviewed containerd drop-in, and
labels driver drift and GPU features; its discover subcommand sets nvidia.com/gpu.present on
nodes with an NVIDIA GPU on the PCI bus. It only ever changes nvidia.com/ labels and annotations
and the GPUStackReady condition (nodes/status) of the node named by NODE_NAME (or --node).

Usage: gpu-node-agent <subcommand> [flags]
       gpu-node-agent --version

Every subcommand also takes the flags all node programs share: --log-format json|text (default
json), --log-level debug|info|warn|error (default info) and --version.
`

// Usage writes the full manual: every subcommand with every flag.
func Usage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	commandsUsage(w, "")
}

// commandsUsage writes the manual of every command whose first word is group ("": all).
func commandsUsage(w io.Writer, group string) {
	for _, c := range commands() {
		if group != "" && groupOf(c.name) != group {
			continue
		}
		fmt.Fprintf(w, "\ngpu-node-agent %s\n    %s\n", c.name, c.summary)
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// groupOf is a command's group, its first word when it has two ("toolkit install"), else "".
func groupOf(name string) string {
	g, _, ok := strings.Cut(name, " ")
	if !ok {
		return ""
	}
	return g
}

// groupSubcommands lists a group's subcommands ("install | uninstall"); "" when name is no group.
func groupSubcommands(group string) string {
	var subs []string
	for _, c := range commands() {
		if groupOf(c.name) == group {
			subs = append(subs, strings.TrimPrefix(c.name, group+" "))
		}
	}
	return strings.Join(subs, " | ")
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// Main executes one gpu-node-agent command line (without the program name) and returns the
// exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	p, code, done := parse(args, stdout, stderr)
	if done {
		return code
	}
	if p.common.PrintVersion(stdout, "gpu-node-agent") {
		return 0
	}
	log, err := p.common.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gpu-node-agent %s: %v\n", p.name, err)
		return 2
	}
	if err := p.run(ctx, &env{stdout: stdout, stderr: stderr, log: log, args: p.fs.Args()}); err != nil {
		if errors.Is(err, context.Canceled) {
			return 0 // SIGTERM: a clean stop (the toolkit never uninstalls on stop)
		}
		var usage usageError
		if errors.As(err, &usage) {
			fmt.Fprintf(stderr, "gpu-node-agent %s: %v\n", p.name, err)
			return 2
		}
		log.Error("gpu-node-agent "+p.name+" failed", "error", err)
		return 1
	}
	return 0
}

// CheckArgs parses a command line (without the program name) exactly as Main does, with the
// same flag sets and checks, and runs nothing: the rendered DaemonSets' args are tested with it.
func CheckArgs(args []string) error {
	var out bytes.Buffer
	if _, code, done := parse(args, &out, &out); done && code != 0 {
		return errors.New(strings.TrimSpace(out.String()))
	}
	return nil
}

// parsed is a command line Main can run: its subcommand, flags and common flags.
type parsed struct {
	name   string
	fs     *flag.FlagSet
	run    func(ctx context.Context, env *env) error
	common *commonflags.Flags
}

// parse finds the subcommand, parses and checks its flags. done means exit with code: help,
// the version, or a usage error (written to stderr).
func parse(args []string, stdout, stderr io.Writer) (p parsed, code int, done bool) {
	if len(args) == 0 || isHelp(args[0]) {
		Usage(stdout)
		if len(args) == 0 {
			return p, 2, true
		}
		return p, 0, true
	}
	if args[0] == "version" || args[0] == "--version" || args[0] == "-version" {
		fmt.Fprintln(stdout, commonflags.VersionLine("gpu-node-agent"))
		return p, 0, true
	}
	name, rest := args[0], args[1:]
	if subs := groupSubcommands(name); subs != "" {
		// A group ("toolkit") takes its subcommand next; --help there is the group's manual.
		if len(rest) > 0 && isHelp(rest[0]) {
			fmt.Fprintf(stdout, "Usage: gpu-node-agent %s %s [flags]\n", name, subs)
			commandsUsage(stdout, name)
			return p, 0, true
		}
		if len(rest) == 0 {
			fmt.Fprintf(stderr, "gpu-node-agent %s: want a subcommand: %s (gpu-node-agent %s --help)\n", name, subs, name)
			return p, 2, true
		}
		name, rest = name+" "+rest[0], rest[1:]
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		fs := flag.NewFlagSet("gpu-node-agent "+c.name, flag.ContinueOnError)
		fs.SetOutput(io.Discard) // a parse error is one line, below; only --help prints the manual
		fs.Usage = func() {}
		p = parsed{name: c.name, fs: fs, run: c.flags(fs), common: commonflags.Register(fs)}
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(stderr, "Usage: gpu-node-agent %s [flags]\n    %s\n", c.name, c.summary)
				fs.SetOutput(stderr)
				fs.PrintDefaults()
				return p, 0, true
			}
			fmt.Fprintf(stderr, "gpu-node-agent %s: %s (gpu-node-agent %s --help lists its flags)\n", c.name, flagError(c.name, err), c.name)
			return p, 2, true
		}
		if err := checkPathFlags(fs); err != nil {
			fmt.Fprintf(stderr, "gpu-node-agent %s: %v\n", c.name, err)
			return p, 2, true
		}
		return p, 0, false
	}
	fmt.Fprintf(stderr, "gpu-node-agent: unknown subcommand %q (gate | driver | toolkit install | toolkit uninstall | discover | mig | upgrade | labels; --help)\n", strings.TrimSpace(name))
	return p, 2, true
}

// flagError says what is wrong with a command line that does not parse; an unknown flag that
// another subcommand of the group takes (toolkit uninstall --containerd-version) says which.
func flagError(name string, err error) string {
	unknown, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return err.Error()
	}
	if g := groupOf(name); g != "" {
		for _, c := range commands() {
			if c.name == name || groupOf(c.name) != g {
				continue
			}
			fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
			c.flags(fs)
			if fs.Lookup(unknown) != nil {
				return fmt.Sprintf("--%s is a flag of %s, not of %s: drop it", unknown, c.name, name)
			}
		}
	}
	return fmt.Sprintf("unknown flag --%s", unknown)
}

// usageError is a flag value a command refuses before it does anything: exit 2, like a flag
// that does not parse.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// pathFlags are the flags, of any subcommand, that name a host path or a directory of this
// container; each subcommand's are refused when relative (commonflags.CheckAbsolutePaths), as in
// the device plugin and the exporter.
var pathFlags = []string{"mig-config-dir", "host-root", "proc", "config-path", "drop-in-dir", "containerd-bin", "cdi-spec", "nvidia-ctk", "cdi-driver-root", "containerd-socket"}

func checkPathFlags(fs *flag.FlagSet) error {
	var names []string
	for _, name := range pathFlags {
		if f := fs.Lookup(name); f != nil && !(name == "containerd-bin" && f.Value.String() == toolkit.NoBinary) {
			names = append(names, name)
		}
	}
	return commonflags.CheckAbsolutePaths(fs, names...)
}

// nodeFlag registers --node with NODE_NAME as default.
func nodeFlag(fs *flag.FlagSet) *string {
	return fs.String("node", os.Getenv(nodeapi.NodeNameEnv), "this node's name (default: env "+nodeapi.NodeNameEnv+" from the downward API)")
}

func kubeconfigFlag(fs *flag.FlagSet) *string {
	return fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default: in-cluster service account)")
}

func hostRootFlag(fs *flag.FlagSet) *string {
	return fs.String("host-root", "/host", "where the host's / is mounted; every host path is read and written under it")
}

// every runs fn now and then every interval until ctx ends; interval 0 runs it once.
// everyOrWoken runs fn, then again whenever t fires or interval passed since the last run, until
// ctx ends; what fired before a run is covered by it. An interval of 0 or less runs fn once,
// as every does.
func everyOrWoken(ctx context.Context, interval time.Duration, t *wake.Trigger, log *slog.Logger, fn func(context.Context) error) error {
	for {
		if why := t.Take(); why != nil {
			log.Debug("checking", "why", why)
		}
		err := fn(ctx)
		if interval <= 0 {
			return err
		}
		if err != nil {
			log.Warn("will retry", "error", err, "retryIn", interval)
		}
		if err := t.Wait(ctx, interval); err != nil {
			return err
		}
	}
}

func every(ctx context.Context, interval time.Duration, log *slog.Logger, fn func(context.Context) error) error {
	for {
		err := fn(ctx)
		if interval <= 0 {
			return err
		}
		if err != nil {
			log.Warn("will retry", "error", err, "retryIn", interval)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
