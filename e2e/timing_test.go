package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestJoinToDevicePluginTiming measures, for 1 and for 50 GPU nodes joining at once
// (E2E_TIMING_NODES=1,50 by default), the
// seconds from a node's registration to its device-plugin pod Running. The nodes come with
// the driver preinstalled (as in the example policy); everything else happens as in a real
// cluster: the agent pod starts, opens the driver gate, verifies the driver, opens the
// toolkit gate, the toolkit pod installs and records the handler, the agent opens the device
// plugin gate and the device-plugin pod starts. The agents run with the rendered config's
// interval (30s): what carries the bring-up is their watches (the toolkit status file
// appearing, their Node's labels changing), as on a real node.
func TestJoinToDevicePluginTiming(t *testing.T) {
	d := deployed(t)
	d.fleet.SetInterval(0)
	t.Cleanup(func() { d.fleet.SetInterval(time.Second) })
	sizes := []int{1, 50}
	if v := os.Getenv("E2E_TIMING_NODES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 99 {
				t.Fatalf("E2E_TIMING_NODES=%q: want comma-separated node counts from 1 to 99", v)
			}
			sizes = append(sizes, n)
		}
	}
	var rows []string
	for _, n := range sizes {
		rows = append(rows, measureJoin(t, d, n))
	}
	table := "| nodes joining at once | agent pod Running (median) | toolkit pod Running (median) | device-plugin Running: min | median | p90 | max |\n" +
		"|---:|---:|---:|---:|---:|---:|---:|\n" + strings.Join(rows, "\n") + "\n"
	interval, err := config.AgentInterval(d.fleet.Config())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\nseconds from a fake node joining to its pods Running (kube %s, kwok, %d CPUs, agent interval %s):\n%s\n", "v1.37.2", numCPU(), interval, table)
	if err := os.WriteFile(filepath.Join(env.workDir, "timing.md"), []byte(table), 0o644); err != nil {
		t.Log(err)
	}
}

func measureJoin(t *testing.T, d *deployment, n int) string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := d.fleet.Config().NodePools[0].NodeSelector
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("timing-%d-%02d", n, i)
	}
	rec := newRunningRecorder(d, names)
	if err := rec.start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		h, err := d.fleet.AddHost(name, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SetDriver(d.fleet.Config().Driver.Version); err != nil {
			t.Fatal(err)
		}
	}
	joined := make([]time.Time, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			joined[i] = time.Now()
			if _, err := fakenode.Join(ctx, env.cs, fakenode.Spec{Name: name, GPU: true, Labels: pool}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	defer func() {
		for _, name := range names {
			d.fleet.RemoveHost(name)
			for _, err := range d.fleet.Errors(name) {
				t.Errorf("node agent on %s: %v", name, err)
			}
			_ = env.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	}()
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, fmt.Sprintf("device-plugin pods Running on %d new nodes", n), func() (bool, string) {
		for _, name := range names {
			failOnAgentProblems(t, d, name)
		}
		got := rec.count(config.LabelDeployDevicePlugin)
		return got == n, fmt.Sprintf("%d of %d", got, n)
	})
	col := func(gate string) []float64 {
		var s []float64
		for i, name := range names {
			s = append(s, rec.at(gate, name).Sub(joined[i]).Seconds())
		}
		slices.Sort(s)
		return s
	}
	agent, toolkit, dp := col(""), col(config.LabelDeployToolkit), col(config.LabelDeployDevicePlugin)
	row := fmt.Sprintf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |", n, quantile(agent, 0.5), quantile(toolkit, 0.5),
		dp[0], quantile(dp, 0.5), quantile(dp, 0.9), dp[len(dp)-1])
	t.Logf("%d nodes: %s", n, row)
	return row
}

// runningRecorder notes when each watched node's stage pods were first seen Running; the
// agent's pods are recorded under the gate "".
type runningRecorder struct {
	d      *deployment
	nodes  map[string]bool
	gateOf map[string]string // DaemonSet name -> gate label
	mu     sync.Mutex
	seen   map[string]map[string]time.Time // gate -> node -> time
}

func newRunningRecorder(d *deployment, nodes []string) *runningRecorder {
	r := &runningRecorder{d: d, nodes: map[string]bool{}, gateOf: map[string]string{d.agentDS.Name: ""}, seen: map[string]map[string]time.Time{}}
	for _, n := range nodes {
		r.nodes[n] = true
	}
	for g, dss := range d.stageDaemonSets {
		for _, ds := range dss {
			r.gateOf[ds.Name] = g
		}
	}
	return r
}

func (r *runningRecorder) start(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(env.cs, 0, informers.WithNamespace(r.d.ns))
	inf := f.Core().V1().Pods().Informer()
	note := func(o any) {
		now := time.Now()
		p, ok := o.(*corev1.Pod)
		if !ok || !r.nodes[p.Spec.NodeName] || p.Status.Phase != corev1.PodRunning {
			return
		}
		ref := metav1.GetControllerOf(p)
		if ref == nil {
			return
		}
		g, ok := r.gateOf[ref.Name]
		if !ok {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen[g] == nil {
			r.seen[g] = map[string]time.Time{}
		}
		if _, done := r.seen[g][p.Spec.NodeName]; !done {
			r.seen[g][p.Spec.NodeName] = now
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, o any) { note(o) }}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	return nil
}

func (r *runningRecorder) count(gate string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen[gate])
}

func (r *runningRecorder) at(gate, node string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[gate][node]
}

// quantile of sorted values by nearest rank.
func quantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
