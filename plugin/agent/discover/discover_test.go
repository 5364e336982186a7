package discover

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpupolicy/gpupolicy/plugin/agent/discover/discovertest"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

func TestScanFindsNVIDIADisplayAnd3DControllersOnly(t *testing.T) {
	fs := discovertest.New(t)
	fs.Add("0000:00:02.0", "0x8086", "0x030000") // Intel iGPU: another vendor's VGA
	fs.Add("0000:3b:00.0", "0x10de", "0x030200") // data-centre GPU: 3D controller
	fs.Add("0000:3b:00.1", "0x10de", "0x040300") // the card's HD audio function
	fs.Add("0000:17:00.0", "0x10DE", "0x030000") // workstation GPU: VGA (upper-case hex)
	fs.Add("0000:5e:00.0", "0x10de", "0x068000") // NVSwitch bridge: not a GPU
	fs.Add("0000:17:00.2", "0x10de", "0x0c0330") // the card's USB-C controller
	fs.Add("0000:af:00.0", "0x10de", "0x038000") // "other display controller": neither VGA nor 3D
	got, err := Scan(fs.Root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0000:17:00.0", "0000:3b:00.0"}; !slices.Equal(Addresses(got), want) {
		t.Fatalf("Scan = %v, want %v", got, want)
	}
}

func TestScanWithoutSysfsIsAnError(t *testing.T) {
	_, err := Scan(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "mount the host's /sys") {
		t.Fatalf("Scan without sysfs: %v", err)
	}
}

const node = "gpu-1"

func newNode(labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: labels, ResourceVersion: "1"}}
}

func reconciler(cs *fake.Clientset, root string) *Reconciler {
	return &Reconciler{Client: cs, Node: node, HostRoot: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func nodeLabels(t *testing.T, cs *fake.Clientset) map[string]string {
	t.Helper()
	obj, err := cs.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", node)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*corev1.Node).Labels
}

// patches are the bodies of the node patches sent.
func patches(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "nodes" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

func events(t *testing.T, cs *fake.Clientset) []corev1.Event {
	t.Helper()
	l, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func TestLabelsOnlyGPUPresentOnAGPUNode(t *testing.T) {
	fs := discovertest.New(t)
	fs.Add("0000:3b:00.0", "0x10de", "0x030200")
	cs := fake.NewClientset(newNode(map[string]string{"kubernetes.io/os": "linux", "nvidia.com/gpu.product": "H200"}))
	res, err := reconciler(cs, fs.Root).Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Label != "true" || res.OptOut || len(res.GPUs) != 1 {
		t.Fatalf("result %+v", res)
	}
	ps := patches(cs)
	if len(ps) != 1 {
		t.Fatalf("want one patch, got %q", ps)
	}
	var body struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(ps[0]), &body); err != nil {
		t.Fatal(err)
	}
	if string(body.Metadata["labels"]) != `{"nvidia.com/gpu.present":"true"}` || body.Metadata["annotations"] != nil {
		t.Fatalf("patch %s: want exactly the one label", ps[0])
	}
	want := map[string]string{"kubernetes.io/os": "linux", "nvidia.com/gpu.product": "H200", config.LabelGPUPresent: "true"}
	if got := nodeLabels(t, cs); !maps.Equal(got, want) {
		t.Fatalf("labels %v, want %v", got, want)
	}

	// Labelled: the next pass reads and patches nothing.
	cs.ClearActions()
	if _, err := reconciler(cs, fs.Root).Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ps := patches(cs); len(ps) != 0 {
		t.Fatalf("second pass patched %q", ps)
	}
}

func TestCPUNodeIsLeftAloneAndTheProgramStillWorks(t *testing.T) {
	fs := discovertest.New(t)
	fs.Add("0000:00:02.0", "0x8086", "0x030000")
	cs := fake.NewClientset(newNode(nil))
	res, err := reconciler(cs, fs.Root).Reconcile(context.Background())
	if err != nil {
		t.Fatalf("a CPU node is a working pass: %v", err)
	}
	if len(res.GPUs) != 0 || res.Label != "" || len(patches(cs)) != 0 {
		t.Fatalf("CPU node: result %+v, patches %q", res, patches(cs))
	}
}

func TestAPersonsFalseIsKept(t *testing.T) {
	fs := discovertest.New(t)
	fs.Add("0000:3b:00.0", "0x10de", "0x030200")
	cs := fake.NewClientset(newNode(map[string]string{config.LabelGPUPresent: "false"}))
	r := reconciler(cs, fs.Root)
	for range 2 {
		res, err := r.Reconcile(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !res.OptOut || res.Label != "false" {
			t.Fatalf("result %+v", res)
		}
	}
	if ps := patches(cs); len(ps) != 0 {
		t.Fatalf("opt-out overwritten: %q", ps)
	}
	if got := nodeLabels(t, cs)[config.LabelGPUPresent]; got != "false" {
		t.Fatalf("label %q", got)
	}
}

func TestALostGPUIsReportedOnceAndTheLabelKept(t *testing.T) {
	fs := discovertest.New(t)
	fs.Add("0000:3b:00.0", "0x10de", "0x030200")
	fs.Add("0000:86:00.0", "0x10de", "0x030200")
	cs := fake.NewClientset(newNode(nil))
	r := reconciler(cs, fs.Root)
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	fs.Remove("0000:86:00.0")
	cs.ClearActions()
	res, err := r.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GPUs) != 1 || res.Label != "true" {
		t.Fatalf("result %+v", res)
	}
	if ps := patches(cs); len(ps) != 0 {
		t.Fatalf("label changed on GPU loss: %q", ps)
	}
	evs := events(t, cs)
	if len(evs) != 1 {
		t.Fatalf("want one event, got %d", len(evs))
	}
	ev := evs[0]
	if ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonGPULost || ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != node ||
		!strings.Contains(ev.Message, "1 GPU(s)") || !strings.Contains(ev.Message, "0000:86:00.0") {
		t.Fatalf("event %+v", ev)
	}

	// The last GPU goes too: reported (once more, this one), the label still kept.
	fs.Remove("0000:3b:00.0")
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(events(t, cs)); n != 2 {
		t.Fatalf("want 2 events after the second loss and a quiet pass, got %d", n)
	}
	if got := nodeLabels(t, cs)[config.LabelGPUPresent]; got != "true" {
		t.Fatalf("label %q after losing every GPU", got)
	}
}
