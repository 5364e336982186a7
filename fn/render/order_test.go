package render_test

import (
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

func TestOrderingMetadata(t *testing.T) {
	wantWave := map[string]int{
		render.NameDiscovery: -1, render.NameNodeAgent: -1, render.NameDriver: 0, render.NameToolkit: 1,
		render.NameDevicePlugin: 2, render.NameFeatureDiscovery: 3, render.NameExporter: 3,
	}
	for _, name := range cases(t) {
		p, objs := load(t, name)
		for _, o := range objs {
			a := o.Obj.GetAnnotations()
			switch p.Spec.GitOps {
			case "argocd":
				if a[render.AnnotationSyncWave] != strconv.Itoa(o.Stage.Wave()) {
					t.Errorf("%s %s: sync-wave %q, stage %s", name, o, a[render.AnnotationSyncWave], o.Stage)
				}
				if w, ok := wantWave[o.Obj.GetName()]; ok && o.Obj.GetObjectKind().GroupVersionKind().Kind == "DaemonSet" && o.Stage.Wave() != w {
					t.Errorf("%s %s: wave %d, want %d", name, o, o.Stage.Wave(), w)
				}
			case "flux":
				if a[render.AnnotationStage] != string(o.Stage) || a[render.AnnotationSyncWave] != "" {
					t.Errorf("%s %s: annotations %v", name, o, a)
				}
			case "none":
				if len(a) != 0 {
					t.Errorf("%s %s: gitops none must carry no ordering annotations, has %v", name, o, a)
				}
			}
		}
	}
}

// TestGates: every stage DaemonSet requires the entry selector and its stage label In [true]
// in every node affinity term; the node agent needs only the entry selector. Discovery, which
// sets the entry label, runs on every Linux node instead.
func TestGates(t *testing.T) {
	gate := map[render.Stage]string{
		render.StageDriver: config.LabelDeployDriver, render.StageToolkit: config.LabelDeployToolkit,
		render.StageDevicePlugin: config.LabelDeployDevicePlugin,
	}
	eachDaemonSet(t, func(name string, p *v1alpha1.GPUPolicy, o render.Object, ds *appsv1.DaemonSet) {
		want := gate[o.Stage]
		if ds.Name == render.NameDiscovery {
			if sel := ds.Spec.Template.Spec.NodeSelector; len(sel) != 1 || sel[corev1.LabelOSStable] != "linux" || ds.Spec.Template.Spec.Affinity != nil {
				t.Errorf("%s %s: discovery must run on every Linux node: nodeSelector %v, affinity %v", name, o, sel, ds.Spec.Template.Spec.Affinity)
			}
			return
		}
		switch ds.Name {
		case render.NameFeatureDiscovery:
			want = config.LabelDeployFeatureDiscovery
		case render.NameExporter:
			want = config.LabelDeployExporter
		case render.NameMIGManager:
			want = config.LabelDeployMIGManager
		}
		if strings.HasPrefix(ds.Name, render.NameMPSControlDaemon) {
			want = config.LabelDeployMPSControlDaemon
		}
		terms := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		for _, term := range terms {
			for k, v := range p.Spec.NodeSelector {
				if !hasIn(term, k, v) {
					t.Errorf("%s %s: a term lacks the entry selector %s=%s", name, o, k, v)
				}
			}
			if want != "" && !hasIn(term, want, "true") {
				t.Errorf("%s %s: a term lacks the gate %s In [true]", name, o, want)
			}
		}
	})
}

func hasIn(term corev1.NodeSelectorTerm, key, value string) bool {
	for _, r := range term.MatchExpressions {
		if r.Key == key && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 && r.Values[0] == value {
			return true
		}
	}
	return false
}

// TestLongNames: names that become label values are refused with the field to change.
func TestLongNames(t *testing.T) {
	p, _ := load(t, "pools")
	p.Spec.NodePools[0].Name = strings.Repeat("a", 46)
	_, err := render.Render(p)
	if err == nil || !strings.Contains(err.Error(), "spec.nodePools[0].name") {
		t.Fatalf("want an error on spec.nodePools[0].name, got %v", err)
	}
	p.Spec.NodePools[0].Name = strings.Repeat("a", 45)
	if _, err := render.Render(p); err != nil {
		t.Fatal(err)
	}
}

// eachDaemonSet calls fn for every DaemonSet of every golden case.
func eachDaemonSet(t *testing.T, fn func(name string, p *v1alpha1.GPUPolicy, o render.Object, ds *appsv1.DaemonSet)) {
	for _, name := range cases(t) {
		p, objs := load(t, name)
		for _, o := range objs {
			if ds, ok := o.Obj.(*appsv1.DaemonSet); ok {
				fn(name, p, o, ds)
			}
		}
	}
}
