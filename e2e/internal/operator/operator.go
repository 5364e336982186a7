// Package operator runs NVIDIA's real GPU Operator (its controller manager, built by
// e2e/hack/build-operator.sh) out of cluster against an e2e control plane, for the takeover
// test. The operator reads its state manifests from /opt/gpu-operator and the host's OS from
// /host-etc/os-release, fixed paths; it runs chrooted into a directory that holds those, its
// binary and a kubeconfig, so the machine's own / stays untouched. It needs no cgo (the build
// is static), no network beyond the loopback API server, and root only for the chroot.
package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
)

// Peer is the cached build: the binary, the /opt/gpu-operator tree and the chart's CRDs.
type Peer struct {
	Dir     string
	Bin     string
	Opt     string // assets/ and manifests/ as the operator's image lays them out
	CRDs    string
	Chart   string // deployments/gpu-operator, the Helm chart of the same version
	Version string
}

// Ensure runs buildScript (hack/build-operator.sh; cached, the cold build takes about two
// minutes on two cores) and returns the build it prints.
func Ensure(buildScript string) (*Peer, error) {
	dir, err := cluster.BuildPeer(buildScript)
	if err != nil {
		return nil, err
	}
	p := &Peer{Dir: dir, Bin: filepath.Join(dir, "gpu-operator"), Opt: filepath.Join(dir, "opt", "gpu-operator"), CRDs: filepath.Join(dir, "crds"),
		Chart:   filepath.Join(dir, "chart"),
		Version: strings.TrimPrefix(filepath.Base(dir), "gpu-operator-")}
	for _, f := range []string{p.Bin, filepath.Join(p.Opt, "state-driver"), p.CRDs, filepath.Join(p.Chart, "Chart.yaml")} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("the gpu-operator build in %s is incomplete: %w", dir, err)
		}
	}
	return p, nil
}

// OSRelease is the host OS the operator reads (it picks the driver image's OS suffix from
// the nodes' NFD labels; this file only has to parse).
const OSRelease = "NAME=\"Ubuntu\"\nVERSION_ID=\"22.04\"\nID=ubuntu\n"

// Start lays out root (binary, /opt/gpu-operator, /host-etc/os-release, /kubeconfig from
// kubeconfig's bytes) and runs the operator chrooted into it, watching namespace as its
// OPERATOR_NAMESPACE, without leader election; it returns once its readiness probe answers.
// Stopping it is scaling its Deployment to zero: its objects stay.
func Start(ctx context.Context, p *Peer, root string, kubeconfig []byte, namespace, logPath string) (*cluster.Server, error) {
	if err := layout(p, root, kubeconfig); err != nil {
		return nil, fmt.Errorf("lay out the operator's root %s: %w", root, err)
	}
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	probe := "127.0.0.1:" + strconv.Itoa(ports[0])
	cmd := exec.Command("/gpu-operator", "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address="+probe, "--zap-log-level=info")
	cmd.Dir = "/"
	cmd.Env = []string{"OPERATOR_NAMESPACE=" + namespace, "KUBECONFIG=/kubeconfig", "HOME=/tmp"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	return cluster.Serve(ctx, "gpu-operator", cmd, logPath, "http://"+probe+"/readyz", time.Minute)
}

func layout(p *Peer, root string, kubeconfig []byte) error {
	for _, d := range []string{"opt", "host-etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := linkOrCopy(p.Bin, filepath.Join(root, "gpu-operator"), 0o755); err != nil {
		return err
	}
	if err := os.CopyFS(filepath.Join(root, "opt", "gpu-operator"), os.DirFS(p.Opt)); err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(root, "host-etc", "os-release"), []byte(OSRelease), 0o644),
		os.WriteFile(filepath.Join(root, "kubeconfig"), kubeconfig, 0o600))
}

// linkOrCopy hard-links src to dst (the cache and the work directory usually share a file
// system), or copies it.
func linkOrCopy(src, dst string, mode os.FileMode) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
