package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/mps/mpstest"
)

// env is the control plane every test shares. Tests keep out of each other's way by using
// their own nodes (names prefixed by the test) rather than by resetting the cluster.
var env struct {
	repoRoot string
	bins     *cluster.Binaries
	cluster  *cluster.Cluster
	cfg      *rest.Config
	cs       kubernetes.Interface
	workDir  string
}

var keep = flag.Bool("keep", os.Getenv("E2E_KEEP") != "", "keep the work directory (logs, etcd data, kubeconfig) even when every test passes")

func TestMain(m *testing.M) {
	// The suite's binary is also the stand-in for NVIDIA's nvidia-cuda-mps-control, which the
	// DRA plugin runs for a claim's MPS sharing (it comes with the driver: no GPU here).
	if code, ran := mpstest.Main(); ran {
		os.Exit(code)
	}
	flag.Parse()
	// Flux's engine logs through controller-runtime; the suite reports API warnings and errors
	// itself (stack.WarningRecorder), so the engine's own log is not needed.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(runMain(m))
}

func runMain(m *testing.M) (code int) {
	start := time.Now()
	ctx := context.Background()
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.repoRoot = root
	if env.bins, err = cluster.EnsureBinaries(filepath.Join(root, "e2e", "hack", "build-binaries.sh")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if env.workDir, err = os.MkdirTemp("", "gpupolicy-e2e-"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer func() {
		if code != 0 {
			printLogTails(filepath.Join(env.workDir, "cluster", "logs"), 15)
		}
		if code != 0 || *keep {
			fmt.Fprintf(os.Stderr, "e2e: work directory kept: %s (component logs in %s/cluster/logs, agents in %s/agents)\n", env.workDir, env.workDir, env.workDir)
			return
		}
		os.RemoveAll(env.workDir)
	}()
	c, err := cluster.Start(ctx, env.bins, filepath.Join(env.workDir, "cluster"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start control plane:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: control plane %s up in %s (kubeconfig %s)\n", cluster.KubernetesVersion, time.Since(start).Round(time.Millisecond), c.Kubeconfig)
	env.cluster, env.cfg = c, c.RESTConfig()
	if env.cs, err = kubernetes.NewForConfig(env.cfg); err != nil {
		c.Stop()
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer func() {
		stopDeployment()
		stopStart := time.Now()
		c.Stop()
		fmt.Fprintf(os.Stderr, "e2e: control plane stopped in %s\n", time.Since(stopStart).Round(time.Millisecond))
	}()
	return m.Run()
}

// printLogTails prints the last n lines of every component log, so a CI failure shows the
// control plane's side without access to the machine.
func printLogTails(dir string, n int) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		fmt.Fprintf(os.Stderr, "e2e: last lines of %s:\n", l)
		for _, line := range lines[max(0, len(lines)-n):] {
			fmt.Fprintf(os.Stderr, "  %s\n", line)
		}
	}
}

// ownControlPlane starts a control plane of a test's own under dir (for a test whose objects
// would collide with the suite's shared stack), stopped when the test ends; a failed test
// prints its components' last log lines and keeps dir.
func ownControlPlane(t *testing.T, dir string, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	c, err := cluster.StartWith(context.Background(), env.bins, filepath.Join(dir, "cluster"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			printLogTails(c.LogDir, 20)
			t.Logf("work directory: %s", dir)
		}
		c.Stop()
	})
	return c
}
