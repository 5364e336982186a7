package realnode

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/e2e/internal/realnode"
)

func TestSmoke(t *testing.T) {
	for _, v := range []string{"1.6", "2.1"} {
		t.Run(v, func(t *testing.T) {
			dir := filepath.Join(env.workDir, "smoke-"+v)
			os.MkdirAll(dir, 0o755)
			n, err := realnode.Start(context.Background(), realnode.Options{
				Name: "smoke", Containerd: v, Containerd21Dir: env.containerd21, Kubelet: env.bins.Kubelet,
				Kubeconfig: env.cluster.Kubeconfig, APIServer: env.cluster.Server, Dir: dir,
				DriverVersion: "550.54.15", Images: []string{"/tmp/node-mkimg/pause.tar"},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := n.Stop(); err != nil {
					t.Error(err)
				}
				env.cs.CoreV1().Nodes().Delete(context.Background(), "smoke", metav1.DeleteOptions{})
			}()
			start := time.Now()
			for time.Since(start) < 60*time.Second {
				node, err := env.cs.CoreV1().Nodes().Get(context.Background(), "smoke", metav1.GetOptions{})
				if err == nil {
					for _, c := range node.Status.Conditions {
						if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
							t.Logf("ready after %s: %v", time.Since(start), node.Status.Addresses)
							d, err := n.ConfigDump(context.Background())
							t.Logf("dump err=%v len=%d", err, len(d))
							return
						}
					}
				}
				time.Sleep(200 * time.Millisecond)
			}
			t.Fatalf("not ready\n%s\n%s\n%s", n.Tail("init", 20), n.Tail("containerd", 20), n.Tail("kubelet", 40))
		})
	}
}
