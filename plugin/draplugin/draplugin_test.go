package draplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

const node = "gpu-node-1"

func newDriver(t testing.TB, m *gpumock.Mock, cdiDir string) *Driver {
	t.Helper()
	if m == nil {
		var err error
		if m, err = gpumock.New("dgxa100"); err != nil {
			t.Fatal(err)
		}
		if ret := m.Init(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	cfg := config.DefaultDevicePlugin()
	cfg.HealthChecks.RecoveryPeriod = "300ms"
	if cdiDir == "" {
		cdiDir = t.TempDir()
	}
	base := t.TempDir()
	d, err := New(Options{Lib: m, Config: cfg, KubeClient: fake.NewClientset(), NodeName: node,
		PluginsDir: filepath.Join(base, "plugins"), RegistryDir: filepath.Join(base, "registry"), CDIDir: cdiDir,
		HostRoot: t.TempDir(), ProbeInterval: 50 * time.Millisecond, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// nvidiaAttributes are the attributes NVIDIA's DRA driver (k8s-dra-driver-gpu,
// cmd/gpu-kubelet-plugin/deviceinfo.go, and its README's CEL examples) publishes under
// gpu.nvidia.com, with their type and, for the dgxa100 mock's first GPU, the value: a
// DeviceClass or claim selector written for NVIDIA's driver reads the same here.
var nvidiaAttributes = []struct {
	name, kind, gpu string // kind: string | int | version; gpu: gpu-0's value ("" = any)
	mig             bool   // also on MIG devices (with the parent GPU's value)
}{
	{"type", "string", "gpu", false},
	{"uuid", "string", "", true},
	{"productName", "string", "NVIDIA A100-SXM4-40GB", true},
	{"brand", "string", "Nvidia", true},
	{"architecture", "string", "Ampere", true},
	{"cudaComputeCapability", "version", "8.0.0", true},
	{"driverVersion", "version", "", true},
	{"cudaDriverVersion", "version", "", true},
	{"pcieBusID", "string", "", true},
	{"resource.kubernetes.io/pciBusID", "string", "", true},
	{"index", "int", "0", false},
	{"minor", "int", "", false},
}

// nvidiaMIGAttributes are those NVIDIA's driver adds on a MIG device.
var nvidiaMIGAttributes = []struct{ name, kind string }{
	{"type", "string"}, {"parentUUID", "string"}, {"profile", "string"}, {"parentMinor", "int"},
}

func attrKind(a resourceapi.DeviceAttribute) (kind, value string) {
	switch {
	case a.StringValue != nil:
		return "string", *a.StringValue
	case a.IntValue != nil:
		return "int", fmt.Sprint(*a.IntValue)
	case a.VersionValue != nil:
		return "version", *a.VersionValue
	case a.BoolValue != nil:
		return "bool", fmt.Sprint(*a.BoolValue)
	}
	return "", ""
}

// TestNVIDIAAttributeTable: every attribute of the table, on every device it belongs to, with
// its type, and gpu-0's values where the table gives one.
func TestNVIDIAAttributeTable(t *testing.T) {
	d := newDriver(t, nil, "")
	g := d.Devices()[0].API
	for _, a := range nvidiaAttributes {
		kind, value := attrKind(g.Attributes[resourceapi.QualifiedName(a.name)])
		if kind != a.kind || (a.gpu != "" && value != a.gpu) {
			t.Errorf("gpu-0 %s: %s %q, want %s %q", a.name, kind, value, a.kind, a.gpu)
		}
	}
	fixture, err := gpumock.New("dgxa100", gpumock.WithMIGStateFile(migStateFixture))
	if err != nil {
		t.Fatal(err)
	}
	fixture.Init()
	md := newDriver(t, fixture, "")
	var mig *resourceapi.Device
	for _, dev := range md.Devices() {
		if dev.Parent != "" {
			mig = &dev.API
			break
		}
	}
	if mig == nil {
		t.Fatal("no MIG device published with MIG on")
	}
	for _, a := range nvidiaAttributes {
		if !a.mig {
			continue
		}
		if kind, _ := attrKind(mig.Attributes[resourceapi.QualifiedName(a.name)]); kind != a.kind {
			t.Errorf("%s %s: %s, want %s", mig.Name, a.name, kind, a.kind)
		}
	}
	for _, a := range nvidiaMIGAttributes {
		if kind, _ := attrKind(mig.Attributes[resourceapi.QualifiedName(a.name)]); kind != a.kind {
			t.Errorf("%s %s: %s, want %s", mig.Name, a.name, kind, a.kind)
		}
	}
	for _, c := range []string{"memory", "multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines"} {
		if _, ok := mig.Capacity[resourceapi.QualifiedName(c)]; !ok {
			t.Errorf("%s lacks NVIDIA's capacity %s", mig.Name, c)
		}
	}
}

// TestInventoryHasNVIDIADriverAttributes: the published attribute and capacity names are NVIDIA's
// DRA driver's, and their values pass the API's ResourceSlice validation.
func TestInventoryHasNVIDIADriverAttributes(t *testing.T) {
	d := newDriver(t, nil, "")
	if len(d.Devices()) != 8 {
		t.Fatalf("%d devices, want the dgxa100 mock's 8 GPUs", len(d.Devices()))
	}
	g := d.Devices()[0].API
	for _, a := range []resourceapi.QualifiedName{"type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion", "cudaDriverVersion", "resource.kubernetes.io/pciBusID"} {
		if _, ok := g.Attributes[a]; !ok {
			t.Errorf("GPU lacks attribute %s: %v", a, g.Attributes)
		}
	}
	if *g.Attributes["type"].StringValue != "gpu" || g.Name != "gpu-0" || *g.Attributes["architecture"].StringValue != "Ampere" {
		t.Errorf("gpu-0: %+v", g)
	}
	if mem := g.Capacity["memory"].Value; mem.Cmp(*resourceQuantity("40Gi")) < 0 {
		t.Errorf("memory %s, want ≥ 40Gi (A100 40GB)", mem.String())
	}
	if err := validateSlice(d.Devices()); err != nil {
		t.Errorf("the API would refuse the slice: %v", err)
	}
}

// TestInventoryPublishesMIGDevicesInsteadOfTheirGPU: a GPU in MIG mode is published only as
// its MIG devices, each with parentUUID, profile and the MIG capacities.
func TestInventoryPublishesMIGDevicesInsteadOfTheirGPU(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	m.Init()
	one := nvml.GPU_INSTANCE_PROFILE_1_SLICE
	if err := m.ConfigureMIG(0, one, one, one, one, one, one, one); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, m, "")
	var mig, gpus int
	for _, dev := range d.Devices() {
		switch *dev.API.Attributes["type"].StringValue {
		case "mig":
			mig++
			if dev.Parent == "" || *dev.API.Attributes["parentUUID"].StringValue != dev.Parent || *dev.API.Attributes["profile"].StringValue != "1g.5gb" {
				t.Errorf("MIG device %s: %v", dev.Name, dev.API.Attributes)
			}
			for _, c := range []resourceapi.QualifiedName{"memory", "multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines"} {
				if _, ok := dev.API.Capacity[c]; !ok {
					t.Errorf("MIG device %s lacks capacity %s", dev.Name, c)
				}
			}
		case "gpu":
			gpus++
			if dev.Name == "gpu-0" {
				t.Errorf("gpu-0 is in MIG mode and must not be published whole")
			}
		}
	}
	if mig != 7 || gpus != 7 {
		t.Errorf("%d MIG devices and %d GPUs, want 7 and 7", mig, gpus)
	}
	if err := validateSlice(d.Devices()); err != nil {
		t.Errorf("the API would refuse the slice: %v", err)
	}
}

func claim(uid string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c-" + uid, Namespace: "ml", UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: config.DRADriverName, Pool: node, Device: d})
	}
	return c
}

// writeNodeSpec writes the node's CDI spec as the toolkit stage's nvidia-ctk does (kind
// nvidia.com/gpu, one device per GPU and MIG UUID). Each device's edit names its UUID in a
// variable of its own, so a test sees which ones a container got.
func writeNodeSpec(t testing.TB, dir string, d *Driver) {
	t.Helper()
	spec := "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
	for _, dev := range d.Devices() {
		spec += fmt.Sprintf("- name: %s\n  containerEdits:\n    env: [\"NODE_SPEC_%s=%s\"]\n", dev.UUID, strings.ReplaceAll(dev.UUID, "-", "_"), dev.UUID)
	}
	spec += "containerEdits:\n  env: [\"NODE_SPEC_LIBRARIES=1\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
}

// containerIDs are the CDI ids the kubelet hands a container that references requests of a
// claim (resources.claims[].request): those of the devices allocated for those requests.
func containerIDs(res kubeletplugin.PrepareResult, requests ...string) []string {
	var ids []string
	for _, dev := range res.Devices {
		if slices.ContainsFunc(dev.Requests, func(r string) bool { return slices.Contains(requests, r) }) {
			ids = append(ids, dev.CDIDeviceIDs...)
		}
	}
	return ids
}

// inject applies CDI devices to an empty OCI spec with the CDI library container runtimes use,
// reading the specs in dir, and returns the container's environment.
func inject(t *testing.T, dir string, ids []string) []string {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the CDI library refuses a spec: %v", errs)
	}
	oci := &rspec.Spec{Process: &rspec.Process{}}
	if _, err := cache.InjectDevices(oci, ids...); err != nil {
		t.Fatalf("inject %v: %v", ids, err)
	}
	return oci.Process.Env
}

// TestContainerSeesOnlyItsRequestsDevices: a claim with two requests (gpu-1 and gpu-2 for
// "train", gpu-3 for "eval"); a container that references one request gets, through the CDI
// library container runtimes use, exactly that request's GPUs: their own edits and their node
// spec devices, nothing naming another GPU of the claim, and NVIDIA_VISIBLE_DEVICES=void so
// nvidia-container-runtime adds none. Unprepare removes the spec.
func TestContainerSeesOnlyItsRequestsDevices(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, nil, dir)
	writeNodeSpec(t, dir, d)
	c := claim("uid-a", "gpu-1", "gpu-2", "gpu-3")
	c.Status.Allocation.Devices.Results[2].Request = "eval"
	for i := range 2 {
		c.Status.Allocation.Devices.Results[i].Request = "train"
	}
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || res["uid-a"].Err != nil {
		t.Fatalf("prepare: %v %v", err, res["uid-a"].Err)
	}
	uuid := func(name string) string { return d.byName[name].UUID }
	for _, ctr := range []struct {
		requests []string
		own      []string
	}{
		{[]string{"eval"}, []string{"gpu-3"}},
		{[]string{"train"}, []string{"gpu-1", "gpu-2"}},
		{[]string{"train", "eval"}, []string{"gpu-1", "gpu-2", "gpu-3"}},
	} {
		env := inject(t, dir, containerIDs(res["uid-a"], ctr.requests...))
		joined := strings.Join(env, " ")
		if !slices.Contains(env, "NVIDIA_VISIBLE_DEVICES=void") || !slices.Contains(env, "NODE_SPEC_LIBRARIES=1") {
			t.Errorf("requests %v: env %q lacks NVIDIA_VISIBLE_DEVICES=void or the node spec's driver files", ctr.requests, env)
		}
		for _, name := range []string{"gpu-1", "gpu-2", "gpu-3"} {
			mine := slices.Contains(ctr.own, name)
			own := fmt.Sprintf("GPUPOLICY_DRA_DEVICE_%s=%s", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), uuid(name))
			node := fmt.Sprintf("NODE_SPEC_%s=%s", strings.ReplaceAll(uuid(name), "-", "_"), uuid(name))
			if mine != slices.Contains(env, own) || mine != slices.Contains(env, node) {
				t.Errorf("requests %v: %s (%s) in the container: edits %v, node spec %v; want %v", ctr.requests, name, uuid(name), slices.Contains(env, own), slices.Contains(env, node), mine)
			}
			if !mine && strings.Contains(joined, uuid(name)) {
				t.Errorf("requests %v: the container's env names %s of request it does not reference: %q", ctr.requests, name, env)
			}
		}
	}
	if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "uid-a"}}); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, config.DRAClaimCDIFilePrefix+"*")); len(left) != 0 {
		t.Errorf("unprepare left %v", left)
	}
	// Idempotent: the kubelet may ask again.
	if r, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "uid-a"}}); err != nil || r["uid-a"] != nil {
		t.Errorf("second unprepare: %v %v", err, r["uid-a"])
	}
}

// Without the node's spec entry for a GPU, its containers would start without the driver's
// files: prepare refuses (the kubelet retries) and writes nothing.
func TestPrepareNeedsTheNodeSpec(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, nil, dir)
	res, _ := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("uid-a", "gpu-1")})
	if err := res["uid-a"].Err; err == nil || !strings.Contains(err.Error(), "toolkit.cdi is true") {
		t.Errorf("prepare without the node spec: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), []byte("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, _ = d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("uid-a", "gpu-1")})
	if err := res["uid-a"].Err; err == nil || !strings.Contains(err.Error(), "has no device nvidia.com/gpu="+d.byName["gpu-1"].UUID) {
		t.Errorf("prepare with a node spec that lacks the GPU: %v", err)
	}
	if _, err := os.Stat(d.cdi.path("uid-a")); err == nil {
		t.Error("a refused claim got a CDI spec")
	}
}

// TestPrepareRefusesADeviceHeldByAnotherClaim, also after a restart of the plugin (the held
// devices are read back from the CDI specs).
func TestPrepareRefusesADeviceHeldByAnotherClaim(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, nil, dir)
	writeNodeSpec(t, dir, d)
	ctx := context.Background()
	if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-a", "gpu-3")}); res["uid-a"].Err != nil {
		t.Fatal(res["uid-a"].Err)
	}
	restarted := newDriver(t, nil, dir)
	res, _ := restarted.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-b", "gpu-3"), claim("uid-a", "gpu-3"), claim("uid-c", "gpu-9")})
	if err := res["uid-b"].Err; err == nil || !strings.Contains(err.Error(), "already prepared for claim uid-a") {
		t.Errorf("second claim on gpu-3: %v", err)
	}
	if err := res["uid-a"].Err; err != nil {
		t.Errorf("preparing the same claim again must succeed (kubelet retries): %v", err)
	}
	if err := res["uid-c"].Err; err == nil || !strings.Contains(err.Error(), "does not exist on node") {
		t.Errorf("unknown device: %v", err)
	}
	if _, err := os.Stat(restarted.cdi.path("uid-b")); err == nil {
		t.Errorf("a refused claim got a CDI spec")
	}
}

// TestXIDWithdrawsTheDeviceUntilItRecovers: a critical XID takes the GPU out of the published
// slice (and Prepare refuses it); after the recovery period it is published again.
func TestXIDWithdrawsTheDeviceUntilItRecovers(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	m.Init()
	d := newDriver(t, m, "")
	ctx, next := runPublishing(t, d)
	next("all 8 GPUs", func(n []string) bool { return len(n) == 8 })
	if _, err := m.InjectXID(5, 79); err != nil {
		t.Fatal(err)
	}
	next("gpu-5 withdrawn", func(n []string) bool { return len(n) == 7 && !slices.Contains(n, "gpu-5") })
	if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-x", "gpu-5")}); res["uid-x"].Err == nil || !strings.Contains(res["uid-x"].Err.Error(), "unhealthy") {
		t.Errorf("prepare of an unhealthy GPU: %v", res["uid-x"].Err)
	}
	next("gpu-5 back", func(n []string) bool { return len(n) == 8 })
}

// A GPU whose driver counted uncorrected ECC errors before the plugin started is left out of
// the first publication: no claim is ever allocated on it.
func TestECCErrorsBeforeStartLeaveTheFirstSlice(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	m.Init()
	if err := m.AddDoubleBitErrors(3, 2); err != nil {
		t.Fatal(err)
	}
	_, next := runPublishing(t, newDriver(t, m, ""))
	next("the first publication", func(n []string) bool {
		if len(n) != 7 || slices.Contains(n, "gpu-3") {
			t.Fatalf("first publication %v, want the 7 GPUs other than gpu-3", n)
		}
		return true
	})
}

// runPublishing runs d until the test ends and returns its context with a helper that waits
// for the next publication that satisfies ok (30 s at most: a bound, not an estimate).
func runPublishing(t *testing.T, d *Driver) (context.Context, func(what string, ok func([]string) bool)) {
	t.Helper()
	d.published = make(chan []string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ctx, func(what string, ok func([]string) bool) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case names := <-d.published:
				if ok(names) {
					return
				}
			case <-timeout:
				t.Fatalf("no publication with %s within 30s", what)
			}
		}
	}
}

func resourceQuantity(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

// validateSlice checks what the API server's ResourceSlice validation checks of a device and
// the mock can get wrong: DNS-label names, unique within the pool, at most
// resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice attributes and capacities, one
// value per attribute, versions in semantic version form. (e2e applies the real thing.)
func validateSlice(devs []Device) error {
	seen := map[string]bool{}
	for _, d := range devs {
		if errs := validation.IsDNS1123Label(d.API.Name); len(errs) > 0 || seen[d.API.Name] {
			return fmt.Errorf("device name %q: %v (duplicate: %v)", d.API.Name, errs, seen[d.API.Name])
		}
		seen[d.API.Name] = true
		if n := len(d.API.Attributes) + len(d.API.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
			return fmt.Errorf("device %s: %d attributes and capacities", d.API.Name, n)
		}
		for name, a := range d.API.Attributes {
			set := 0
			for _, v := range []bool{a.StringValue != nil, a.IntValue != nil, a.BoolValue != nil, a.VersionValue != nil} {
				if v {
					set++
				}
			}
			if set != 1 {
				return fmt.Errorf("device %s attribute %s: %d values", d.API.Name, name, set)
			}
			if a.VersionValue != nil {
				if _, err := version.ParseSemantic(*a.VersionValue); err != nil {
					return fmt.Errorf("device %s attribute %s: %w", d.API.Name, name, err)
				}
			}
		}
	}
	return nil
}
