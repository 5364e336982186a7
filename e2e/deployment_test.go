package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/fluxcd/pkg/ssa/utils"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// deployment is the rendered stack applied wave by wave to the shared cluster, plus the
// agents that play the node side. Tests that need it call deployed(t); the first call pays
// for rendering and applying, and its failure fails every test that depends on it.
type deployment struct {
	objects []*unstructured.Unstructured
	waves   []stack.Wave
	applied [][]string // per wave, the change set entries ("Kind/ns/name created")
	ns      string
	agentDS *appsv1.DaemonSet
	// stageDaemonSets maps a gate label (nvidia.com/gpu.deploy.*) to the DaemonSets it gates.
	stageDaemonSets map[string][]*appsv1.DaemonSet
	fleet           *fakenode.Fleet
	cancel          context.CancelFunc
}

var (
	deployOnce sync.Once
	deployed_  *deployment
	deployErr  error
)

func deployed(t *testing.T) *deployment {
	t.Helper()
	deployOnce.Do(func() { deployed_, deployErr = deploy() })
	if deployErr != nil {
		t.Fatalf("deploy the rendered stack: %v", deployErr)
	}
	return deployed_
}

func stopDeployment() {
	if deployed_ != nil && deployed_.fleet != nil {
		deployed_.cancel()
		deployed_.fleet.Stop()
	}
}

// renderStack is the stack under test: examples/kustomize through real kustomize and the
// real function, or with E2E_STACK=testdata the hand-written stack in testdata/stack (to work
// on the harness without the function).
func renderStack(ctx context.Context) ([]*unstructured.Unstructured, error) {
	if os.Getenv("E2E_STACK") == "testdata" {
		f, err := os.Open(filepath.Join(env.repoRoot, "e2e", "testdata", "stack", "stack.yaml"))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return utils.ReadObjects(f)
	}
	k, err := stack.KustomizeBinary()
	if err != nil {
		return nil, err
	}
	fn := filepath.Join(env.repoRoot, "bin", "gpupolicy-fn")
	if _, err := os.Stat(fn); err != nil {
		return nil, fmt.Errorf("%s is missing: run `make build` (e2e/run.sh does)", fn)
	}
	return stack.Kustomize(ctx, k, filepath.Join(env.repoRoot, "examples", "kustomize"))
}

func deploy() (*deployment, error) {
	ctx := context.Background()
	objs, err := renderStack(ctx)
	if err != nil {
		return nil, err
	}
	if err := stack.InstallMonitoringCRDs(ctx, env.cfg, filepath.Join(env.repoRoot, "e2e", "testdata", "crds")); err != nil {
		return nil, err
	}
	d := &deployment{objects: objs}
	if d.waves, err = stack.ByWave(objs); err != nil {
		return nil, err
	}
	a, err := stack.NewApplier(env.cfg, "argocd-controller")
	if err != nil {
		return nil, err
	}
	for _, w := range d.waves {
		cs, err := a.Apply(ctx, fmt.Sprintf("wave %d", w.Number), w.Objects)
		if err != nil {
			return nil, err
		}
		var entries []string
		for _, e := range cs.Entries {
			entries = append(entries, e.String())
		}
		d.applied = append(d.applied, entries)
	}
	parts, err := nodeSideOf(objs)
	if err != nil {
		return nil, err
	}
	d.agentDS, d.ns, d.stageDaemonSets = parts.agent, parts.agent.Namespace, parts.stages
	agentBin := filepath.Join(env.repoRoot, "bin", "gpu-node-agent")
	if d.fleet, err = fakenode.NewFleet(env.cfg, agentBin, d.agentDS, d.stageDaemonSets, parts.config, filepath.Join(env.workDir, "agents")); err != nil {
		return nil, err
	}
	var fctx context.Context
	fctx, d.cancel = context.WithCancel(ctx)
	if err := d.fleet.Start(fctx); err != nil {
		d.cancel()
		return nil, err
	}
	return d, nil
}

// nodeSide is what fakenode.Fleet needs of a rendered stack: the node agent's DaemonSet and
// configuration, the stage DaemonSets by the gate label they require, and gpu-discovery's
// DaemonSet (nil when the policy renders none).
type nodeSide struct {
	agent, discovery *appsv1.DaemonSet
	config           []byte
	stages           map[string][]*appsv1.DaemonSet
}

func nodeSideOf(objs []*unstructured.Unstructured) (*nodeSide, error) {
	n := &nodeSide{stages: map[string][]*appsv1.DaemonSet{}}
	for _, o := range objs {
		switch {
		case o.GetKind() == "DaemonSet":
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				return nil, fmt.Errorf("DaemonSet %s: %w", o.GetName(), err)
			}
			switch ds.Name {
			case config.AgentConfigMap:
				n.agent = &ds
			case "gpu-discovery":
				n.discovery = &ds
			}
			if g := gateLabel(&ds); g != "" {
				n.stages[g] = append(n.stages[g], &ds)
			}
		case o.GetKind() == "ConfigMap" && o.GetName() == config.AgentConfigMap:
			s, _, _ := unstructured.NestedString(o.Object, "data", config.AgentConfigFile)
			n.config = []byte(s)
		}
	}
	if n.agent == nil || n.config == nil {
		return nil, fmt.Errorf("the rendered stack has no DaemonSet and ConfigMap %q (key %s)", config.AgentConfigMap, config.AgentConfigFile)
	}
	return n, nil
}

// gateLabel is the nvidia.com/gpu.deploy.* label a stage DaemonSet requires, from its
// nodeSelector or its required node affinity ("" for the agent, which only needs the entry).
func gateLabel(ds *appsv1.DaemonSet) string {
	spec := ds.Spec.Template.Spec
	var keys []string
	for k := range spec.NodeSelector {
		keys = append(keys, k)
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Operator == corev1.NodeSelectorOpIn {
					keys = append(keys, e.Key)
				}
			}
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, g := range []string{config.LabelDeployDriver, config.LabelDeployToolkit, config.LabelDeployDevicePlugin,
			config.LabelDeployFeatureDiscovery, config.LabelDeployExporter} {
			if k == g {
				return g
			}
		}
	}
	return ""
}
