// Package observers runs the two programs that watch a cluster on gpupolicy's behalf without
// being part of it, out of cluster against an e2e control plane: Node Feature Discovery's
// nfd-master (it turns NodeFeature objects into node labels through NodeFeatureRules, the
// rendered spec.discovery: nfd) and kube-state-metrics (it exports the Node conditions and
// DaemonSet status the rendered alerts read). Both are the real programs, built by
// e2e/hack/build-nfd-ksm.sh.
package observers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
)

// Peer is the cached build.
type Peer struct {
	NFDMaster, KubeStateMetrics string
	// CRDs holds NFD's CRDs (NodeFeature, NodeFeatureRule, NodeFeatureGroup).
	CRDs string
}

// Ensure runs buildScript (cached; cold, about five minutes on two cores) and returns the build
// it prints.
func Ensure(buildScript string) (*Peer, error) {
	dir, err := cluster.BuildPeer(buildScript)
	if err != nil {
		return nil, err
	}
	p := &Peer{NFDMaster: filepath.Join(dir, "nfd-master"), KubeStateMetrics: filepath.Join(dir, "kube-state-metrics"), CRDs: filepath.Join(dir, "crds")}
	for _, f := range []string{p.NFDMaster, p.KubeStateMetrics, filepath.Join(p.CRDs, "nfd-api-crds.yaml")} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("the nfd/kube-state-metrics build in %s is incomplete: %w", dir, err)
		}
	}
	return p, nil
}

// StartNFDMaster runs nfd-master against the cluster of kubeconfig, without leader election,
// with an empty configuration file (NFD's defaults), its namespace namespace, as if its pod ran
// on node (which must exist: nfd-master reads its own Node at start). It is ready once its
// metrics endpoint answers.
func StartNFDMaster(ctx context.Context, p *Peer, dir, kubeconfig, namespace, node string) (*cluster.Server, error) {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nfd-master.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(p.NFDMaster, "-kubeconfig", kubeconfig, "-config", conf,
		"-metrics", strconv.Itoa(ports[0]), "-grpc-health", strconv.Itoa(ports[1]), "-resync-period", "10s")
	cmd.Env = append(os.Environ(), "KUBERNETES_NAMESPACE="+namespace, "NODE_NAME="+node)
	return cluster.Serve(ctx, "nfd-master", cmd, filepath.Join(dir, "nfd-master.log"),
		fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]), time.Minute)
}

// KubeStateMetrics is a running kube-state-metrics.
type KubeStateMetrics struct {
	*cluster.Server
	URL string // its /metrics
}

// StartKubeStateMetrics runs kube-state-metrics for resources (e.g. "nodes,daemonsets") against
// the cluster of kubeconfig, on loopback.
func StartKubeStateMetrics(ctx context.Context, p *Peer, dir, kubeconfig, resources string) (*KubeStateMetrics, error) {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(p.KubeStateMetrics, "--kubeconfig", kubeconfig, "--resources", resources,
		"--host", "127.0.0.1", "--port", strconv.Itoa(ports[0]),
		"--telemetry-host", "127.0.0.1", "--telemetry-port", strconv.Itoa(ports[1]))
	// /readyz is on the telemetry port: 200 once its own metrics are registered.
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	s, err := cluster.Serve(ctx, "kube-state-metrics", cmd, filepath.Join(dir, "kube-state-metrics.log"),
		fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]), time.Minute)
	if err != nil {
		return nil, err
	}
	return &KubeStateMetrics{Server: s, URL: base + "/metrics"}, nil
}

// Sample is one line of an exposition: the series as Prometheus writes it
// (`name{label="value",...}`), its labels, and its value.
type Sample struct {
	Series string
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape reads the exporter's /metrics and returns the samples of the named metrics.
func (k *KubeStateMetrics) Scrape(ctx context.Context, names ...string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s: %s", k.URL, resp.Status, b)
	}
	return Parse(resp.Body, names...)
}

// Parse reads samples of the text exposition format (kube-state-metrics writes no timestamps
// and no escaped quotes in these metrics' label values).
func Parse(r io.Reader, names ...string) ([]Sample, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 {
			return nil, fmt.Errorf("malformed sample %q", line)
		}
		series, value := line[:cut], line[cut+1:]
		name, rest, _ := strings.Cut(series, "{")
		if !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("sample %q: %w", line, err)
		}
		labels := map[string]string{}
		for _, kv := range splitLabels(strings.TrimSuffix(rest, "}")) {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("sample %q: label %q", line, kv)
			}
			labels[k] = strings.Trim(val, `"`)
		}
		out = append(out, Sample{Series: series, Name: name, Labels: labels, Value: v})
	}
	return out, sc.Err()
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
