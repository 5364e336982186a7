// Package cluster starts a real Kubernetes control plane on loopback for the end-to-end
// suite: etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from upstream
// sources, plus kwok, which plays the kubelets of fake nodes. Nothing runs in containers, so
// the suite works on a machine without a container engine.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
)

const (
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1" // first address of serviceCIDR: the kubernetes Service
	// AdminUser holds system:masters through the token file; every component and the test
	// itself use it, and the agent's narrower identity is played by impersonation.
	AdminUser = "e2e-admin"
	// FakeNodeAnnotation marks the nodes kwok manages; real-looking nodes created without it
	// stay NotReady, which a test can use on purpose.
	FakeNodeAnnotation = "kwok.x-k8s.io/node"
	FakeNodeValue      = "fake"
)

// Cluster is a running control plane.
type Cluster struct {
	Dir        string // working directory: pki/, etcd data, logs/, kubeconfig
	LogDir     string
	Kubeconfig string
	Server     string
	token      string
	pki        *pki
	procs      []*process // in start order; stopped in reverse
}

// Start brings up a control plane under dir and returns once the API server is ready and the
// controller manager, scheduler and kwok are healthy. On error everything started is stopped
// and the logs stay under dir/logs.
func Start(ctx context.Context, bins *Binaries, dir string) (*Cluster, error) {
	return StartWith(ctx, bins, dir, Options{})
}

// Options changes how the fake nodes behave.
type Options struct {
	// UnreadyContainers names containers whose pods kwok runs but never marks Ready: kwok
	// reports every pod Ready whatever its probes say, so a test that needs readiness to
	// follow the real program (fakenode.Fleet.MirrorReadiness) takes these pods over.
	UnreadyContainers []string
}

// StartWith is Start with Options.
func StartWith(ctx context.Context, bins *Binaries, dir string, opts Options) (_ *Cluster, err error) {
	c := &Cluster{Dir: dir, LogDir: filepath.Join(dir, "logs"), Kubeconfig: filepath.Join(dir, "kubeconfig")}
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Stop()
			err = fmt.Errorf("%w (logs in %s)", err, c.LogDir)
		}
	}()
	if c.pki, err = writePKI(filepath.Join(dir, "pki")); err != nil {
		return nil, fmt.Errorf("generate certificates: %w", err)
	}
	c.token = strconv.FormatInt(time.Now().UnixNano(), 36) + "-e2e-admin"
	tokens := filepath.Join(dir, "pki", "tokens.csv")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", c.token, AdminUser, AdminUser)), 0o600); err != nil {
		return nil, err
	}
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	c.Server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	if err := c.writeKubeconfig(); err != nil {
		return nil, err
	}

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	if err := c.start(ctx, "etcd", bins.Etcd, httpReady(etcdURL+"/health", nil, ""),
		"--name=e2e", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL,
		// The data is thrown away after the run; fsync only costs time on a shared disk.
		"--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return nil, err
	}

	caPool := x509.NewCertPool()
	caPool.AppendCertsFromPEM(c.pki.caPEM)
	if err := c.start(ctx, "kube-apiserver", bins.KubeAPIServer, httpReady(c.Server+"/readyz", caPool, c.token),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		// The endpoint reconciler refuses a loopback address; nothing here needs the kubernetes
		// Service endpoints (no pod talks to the API server).
		"--endpoint-reconciler-type=none",
		"--tls-cert-file="+c.pki.ServerCert, "--tls-private-key-file="+c.pki.ServerKey,
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.pki.SAPub, "--service-account-signing-key-file="+c.pki.SAKey,
		"--service-cluster-ip-range="+serviceCIDR,
		// The toolkit and driver stages run privileged containers.
		"--allow-privileged=true",
		// On by default since 1.30; named so a changed default cannot silently disable the guardrails.
		"--enable-admission-plugins=ValidatingAdmissionPolicy",
		"--profiling=false",
	); err != nil {
		return nil, err
	}

	if err := c.start(ctx, "kube-controller-manager", bins.KubeControllerManager,
		httpReady(fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), nil, ""),
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(kcmPort),
		"--cert-dir="+filepath.Join(dir, "kcm-certs"),
		"--leader-elect=false",
		"--service-account-private-key-file="+c.pki.SAKey, "--root-ca-file="+c.pki.CACert,
		"--use-service-account-credentials=false",
		"--service-cluster-ip-range="+serviceCIDR,
		// 50 nodes join at once in the timing test; the default DaemonSet concurrency is fine
		// but client-side throttling is not.
		"--kube-api-qps=200", "--kube-api-burst=400",
	); err != nil {
		return nil, err
	}
	if err := c.start(ctx, "kube-scheduler", bins.KubeScheduler,
		httpReady(fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort), nil, ""),
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort),
		"--leader-elect=false",
	); err != nil {
		return nil, err
	}

	stages := filepath.Join(dir, "kwok-stages.yaml")
	if err := kwokStageConfig(bins.KwokStages, stages, opts.UnreadyContainers, "node/fast", "node/heartbeat-with-lease", "pod/fast"); err != nil {
		return nil, err
	}
	if err := c.start(ctx, "kwok", bins.Kwok, httpReady(fmt.Sprintf("http://127.0.0.1:%d/healthz", kwokPort), nil, ""),
		"--kubeconfig="+c.Kubeconfig, "--config="+stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+FakeNodeAnnotation+"="+FakeNodeValue,
		"--node-lease-duration-seconds=40",
		"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort),
		"--cidr=10.244.0.0/16",
	); err != nil {
		return nil, err
	}
	return c, nil
}

// start runs one binary and waits for ready; a process that exits meanwhile fails at once.
func (c *Cluster) start(ctx context.Context, name, bin string, ready func(context.Context) error, args ...string) error {
	p, err := startProcess(c.LogDir, name, bin, args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last error
	for {
		if err := p.running(); err != nil {
			return err
		}
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after 2m: %v; log: %s", name, last, p.logPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops every component in reverse start order (kwok first, etcd last).
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(10 * time.Second)
	}
	c.procs = nil
}

// RESTConfig is an admin configuration that verifies the server against the cluster CA.
// QPS is raised because the suite drives tens of fake nodes at once.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.Server,
		BearerToken:     c.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		QPS:             200,
		Burst:           400,
	}
}

func (c *Cluster) writeKubeconfig() error {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: %s}
current-context: e2e
`, c.Server, c.pki.CACert, AdminUser, c.token, AdminUser)
	return os.WriteFile(c.Kubeconfig, []byte(kc), 0o600)
}

// httpReady polls url until it answers 200. With no CA pool the certificate is not verified:
// the controller manager and scheduler serve self-signed certificates made at start-up, and the
// probe only asks whether they are up.
func httpReady(url string, ca *x509.CertPool, token string) func(context.Context) error {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca, InsecureSkipVerify: ca == nil}} //nolint:gosec // health probe of a self-signed loopback endpoint
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%w: %s answered %s", errNotReady, url, resp.Status)
		}
		return nil
	}
}
