package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/agent/stages"
	"github.com/gpupolicy/gpupolicy/plugin/agent/toolkit"
	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// The gate with a one-hour interval still follows the node at once: the driver's version file
// appearing (a plain file under the fake host root, seen by inotify; on a node the module's
// uevent announces it) opens the toolkit gate, the toolkit status file appearing (its
// directory created by the first install, the file renamed into place) opens the
// device-plugin gate, and a person removing a gate label by hand (re-enabling after an
// opt-out) has it put back through the Node watch. With events ignored, both would wait for
// the interval and the test would time out.
func TestGateFollowsEventsNotInterval(t *testing.T) {
	cfg, err := config.LoadAgent(writeConfig(t, agentYAML))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	version := filepath.Join(root, hostfacts.KernelDriverFile)
	if err := os.MkdirAll(filepath.Dir(version), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &gate.Reconciler{Client: cs, Node: "n1", Checks: stages.Checks(cfg), Logger: log,
		ReadHost: func() hostfacts.Facts { return hostfacts.Read(root) },
		Wake:     gateWatches(ctx, log, cs, "n1", root, filepath.Join(t.TempDir(), "config.yaml"), wake.New(), time.Hour)}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, time.Hour) }()
	label := func(key string) (string, bool) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := n.Labels[key]
		return v, ok
	}
	// The first pass, without a driver, has finished once it said why in the Node condition.
	eventually(t, "GPUStackReady=False DriverNotLoaded after the first pass", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Status.Conditions {
			if string(c.Type) == config.ConditionGPUStackReady {
				return c.Reason == config.ReasonDriverNotLoaded
			}
		}
		return false
	})
	if _, ok := label(config.LabelDeployToolkit); ok {
		t.Fatal("toolkit gate open without a driver")
	}
	if err := os.WriteFile(version, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 00:00:00 UTC 2025\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "toolkit gate open after the driver's version file appeared", func() bool { v, _ := label(config.LabelDeployToolkit); return v == config.GateOpen })
	if _, ok := label(config.LabelDeployDevicePlugin); ok {
		t.Fatal("device-plugin gate open without a toolkit status")
	}

	err = toolkit.WriteStatus(root, toolkit.Status{Verified: true, Handlers: []string{"nvidia"}, DropInSHA256: cfg.Toolkit.DropInSHA256, ContainerdVersion: "2.1.9"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "device-plugin gate open after the status file appeared", func() bool {
		v, _ := label(config.LabelDeployDevicePlugin)
		return v == config.GateOpen
	})

	// Let the passes that the gate's own patches and the file's write caused finish, so that
	// only the Node watch can see the removal below.
	time.Sleep(300 * time.Millisecond)
	n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(n.Labels, config.LabelDeployDevicePlugin)
	if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "device-plugin gate re-opened after a person removed it", func() bool {
		v, _ := label(config.LabelDeployDevicePlugin)
		return v == config.GateOpen
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run ended with %v", err)
	}
}
