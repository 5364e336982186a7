package validate_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/server"
)

// grpcDefaultMaxRecv is gRPC-Go's default receive limit, which the kubelet's device-plugin
// client keeps: a larger ListAndWatch response is refused and the node advertises nothing.
const grpcDefaultMaxRecv = 4 << 20

// Largest node the limit is sized for: 16 GPUs, each split into 7 MIG devices (the most any
// MIG profile gives), every device unhealthy (the longer health string) and on a NUMA node.
const (
	maxGPUs      = 16
	maxMIGPerGPU = 7
)

type captureStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*pluginapi.ListAndWatchResponse
}

func (s *captureStream) Send(r *pluginapi.ListAndWatchResponse) error {
	s.sent = append(s.sent, r)
	return nil
}
func (s *captureStream) Context() context.Context { return s.ctx }

// listAndWatchSize is the wire size of the real device plugin's first ListAndWatch response
// for the largest node at replicas.
func listAndWatchSize(t *testing.T, replicas int) int {
	t.Helper()
	gpus := make([]devices.GPU, maxGPUs)
	for i := range gpus {
		g := devices.GPU{Index: i, UUID: fmt.Sprintf("GPU-%08x-0000-0000-0000-%012x", i, i), NUMA: 1, MIGEnabled: true}
		for m := range maxMIGPerGPU {
			g.MIG = append(g.MIG, devices.MIG{UUID: fmt.Sprintf("MIG-%08x-%04x-0000-0000-%012x", i, m, m), Profile: "1g.10gb", GIID: m, CIID: 0})
		}
		gpus[i] = g
	}
	cfg := config.DevicePlugin{ResourceName: config.DefaultResourceName, MIGStrategy: config.MIGSingle,
		Sharing: config.Sharing{TimeSlicing: config.TimeSlicing{Replicas: replicas}}}
	res, err := devices.Resources(gpus, cfg)
	if err != nil || len(res) != 1 {
		t.Fatalf("resources: %v, %d", err, len(res))
	}
	p := server.New(res[0], server.Options{PluginDir: t.TempDir(), DeviceListStrategy: config.DeviceListEnvVar})
	for _, g := range gpus {
		for _, m := range g.MIG {
			p.SetHealth(m.UUID, false, "test")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // ListAndWatch sends the list once, then returns on the done context
	st := &captureStream{ctx: ctx}
	if err := p.ListAndWatch(&pluginapi.Empty{}, st); err != nil || len(st.sent) != 1 {
		t.Fatalf("ListAndWatch: %v, %d responses", err, len(st.sent))
	}
	if n := len(st.sent[0].Devices); n != maxGPUs*maxMIGPerGPU*replicas {
		t.Fatalf("%d devices, want %d", n, maxGPUs*maxMIGPerGPU*replicas)
	}
	return proto.Size(st.sent[0])
}

// TestReplicasLimitFitsListAndWatch: at the largest replicas the policy accepts, the real
// device plugin's ListAndWatch response for the largest node stays within half of gRPC's
// default message limit, and the limit is not far below what breaks.
func TestReplicasLimitFitsListAndWatch(t *testing.T) {
	limit := int(v1alpha1.Limits["TimeSlicing.Replicas"].Max)
	size := listAndWatchSize(t, limit)
	perDevice := float64(size) / float64(maxGPUs*maxMIGPerGPU*limit)
	breaks := int(float64(grpcDefaultMaxRecv) / perDevice / (maxGPUs * maxMIGPerGPU))
	t.Logf("replicas %d: %d devices, %d bytes (%.1f per device); 4 MiB is reached at ~%d replicas", limit, maxGPUs*maxMIGPerGPU*limit, size, perDevice, breaks)
	if 2*size > grpcDefaultMaxRecv {
		t.Errorf("ListAndWatch at replicas %d is %d bytes, over half of gRPC's %d: lower the limit", limit, size, grpcDefaultMaxRecv)
	}
	if 4*limit < breaks {
		t.Errorf("the limit %d is far below what breaks (~%d replicas): raise it", limit, breaks)
	}
}

// TestExporterIntervalLimitFitsAlerts: at the longest interval the policy accepts, every range
// window of the rendered alerts holds at least four samples and a series survives a missed
// scrape within Prometheus' lookback; the policy at that interval renders without error and
// one beyond it is refused.
func TestExporterIntervalLimitFitsAlerts(t *testing.T) {
	maxInterval := v1alpha1.MaxExporterInterval
	if 2*maxInterval > v1alpha1.PrometheusLookback {
		t.Errorf("max interval %s: two scrapes do not fit the %s lookback", maxInterval, v1alpha1.PrometheusLookback)
	}
	doc := base + "  exporter: {interval: " + maxInterval.String() + "}\n"
	_, objs, res := pipeline.Load([]byte(doc), validate.Options{Now: today})
	if res.HasErrors() {
		t.Fatalf("interval %s refused:\n%s", maxInterval, res.Text(""))
	}
	var ranges []string
	for _, o := range objs {
		u, ok := o.Obj.(*unstructured.Unstructured)
		if !ok || u.GetKind() != "PrometheusRule" {
			continue
		}
		groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "groups")
		for _, g := range groups {
			rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
			for _, r := range rules {
				expr, _ := r.(map[string]any)["expr"].(string)
				for _, m := range rangeRE.FindAllStringSubmatch(expr, -1) {
					ranges = append(ranges, m[1])
				}
			}
		}
	}
	if len(ranges) == 0 {
		t.Fatal("no range windows found in the rendered PrometheusRule")
	}
	for _, r := range ranges {
		d, err := time.ParseDuration(r)
		if err != nil || d < 4*maxInterval {
			t.Errorf("alert window [%s] holds fewer than four samples at interval %s", r, maxInterval)
		}
	}
	over := strings.Replace(doc, "interval: "+maxInterval.String(), "interval: 24h", 1)
	if res := load(t, over); !has(res, want{validate.SeverityError, "spec.exporter.interval", "longer than the limit of 2m30s"}) {
		t.Errorf("interval 24h accepted:\n%s", res.Text(""))
	}
}

var rangeRE = regexp.MustCompile(`\[([0-9]+[smh])\]`)
