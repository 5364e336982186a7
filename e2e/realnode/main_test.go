// Package realnode is the e2e suite on real nodes: a real kubelet and a real containerd (1.6,
// then 2.1) run the rendered stack from the project's image on this machine. It starts its
// own control plane, so it never shares objects with the main e2e package; run.sh runs the
// packages one after the other (go test -p 1).
package realnode

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
)

var env struct {
	repoRoot     string
	bins         *cluster.Binaries
	containerd21 string
	cluster      *cluster.Cluster
	cfg          *rest.Config
	cs           kubernetes.Interface
	workDir      string
}

var keep = flag.Bool("keep", os.Getenv("E2E_KEEP") != "", "keep the work directory (logs, node trees, kubeconfig) even when every test passes")

func TestMain(m *testing.M) {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	os.Exit(runMain(m))
}

func runMain(m *testing.M) (code int) {
	start := time.Now()
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.repoRoot = root
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e/realnode: needs root (mount and PID namespaces, a bridge, iptables)")
		return 1
	}
	if env.bins, err = cluster.EnsureBinaries(filepath.Join(root, "e2e", "hack", "build-binaries.sh")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/realnode:", err)
		return 1
	}
	if env.containerd21, err = containerd21Dir(root); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/realnode:", err)
		return 1
	}
	if env.workDir, err = os.MkdirTemp("", "gpupolicy-realnode-"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/realnode:", err)
		return 1
	}
	defer func() {
		if code != 0 || *keep {
			fmt.Fprintf(os.Stderr, "e2e/realnode: work directory kept: %s (control plane logs in cluster/logs, each node's in <node>/logs)\n", env.workDir)
			return
		}
		os.RemoveAll(env.workDir)
	}()
	c, err := cluster.Start(context.Background(), env.bins, filepath.Join(env.workDir, "cluster"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/realnode: start control plane:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e/realnode: control plane %s up in %s\n", cluster.KubernetesVersion, time.Since(start).Round(time.Millisecond))
	env.cluster, env.cfg = c, c.RESTConfig()
	defer c.Stop()
	if env.cs, err = kubernetes.NewForConfig(env.cfg); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/realnode:", err)
		return 1
	}
	if err := stack.InstallMonitoringCRDs(context.Background(), env.cfg, filepath.Join(env.repoRoot, "e2e", "testdata", "crds")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/realnode: monitoring CRDs:", err)
		return 1
	}
	return m.Run()
}

// containerd21Dir builds (first run: a few minutes) or finds containerd 2.1's binaries with
// e2e/hack/build-containerd.sh, which prints the directory on its last line.
func containerd21Dir(root string) (string, error) {
	cmd := exec.Command("bash", filepath.Join(root, "e2e", "hack", "build-containerd.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("e2e/hack/build-containerd.sh: %w", err)
	}
	l := strings.Split(strings.TrimSpace(string(out)), "\n")
	return l[len(l)-1], nil
}
