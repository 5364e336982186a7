package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/mps/mpstest"
)

// opaque is an opaque device config of driver gpu.nvidia.com with NVIDIA's GpuConfig JSON.
func opaque(params string) resourcev1.DeviceConfiguration {
	return resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
		Driver: config.DRADriverName, Parameters: runtime.RawExtension{Raw: []byte(params)}}}
}

// draSharing: claims carry NVIDIA's GpuConfig (resource.nvidia.com/v1beta1) as their own config
// or their DeviceClass's, written as NVIDIA's DRA driver documentation writes them; the real
// kube-scheduler allocates them and copies the configs into the allocation; the DRA plugin,
// asked through its gRPC socket as the kubelet asks it (NodePrepareResources), fetches each
// claim from the API server and applies its sharing: an MPS control daemon with the config's
// limits (NVIDIA's control program is a stand-in, this binary), a time-slice through
// nvidia-smi (a stand-in that records its arguments); it refuses a config with an unknown
// field, with an Event on the claim. Unprepare undoes the sharing.
func draSharing(t *testing.T, n *draNode, ns string) {
	ctx := context.Background()
	// The node's CDI spec, as the toolkit stage's nvidia-ctk writes it: one device per UUID.
	spec := "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
	for _, dev := range sliceDevices(draSlices(t, n.name)) {
		spec += fmt.Sprintf("- name: %s\n  containerEdits:\n    env: [\"NODE_SPEC=1\"]\n", *dev.Attributes["uuid"].StringValue)
	}
	writeFile(t, filepath.Join(n.root, "cdi", "nvidia.yaml"), spec)

	const gpuConfig = `{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", `
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu-mps.e2e.gpupolicy.dev"},
		Spec: resourcev1.DeviceClassSpec{
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}},
			Config: []resourcev1.DeviceClassConfiguration{{DeviceConfiguration: opaque(gpuConfig + `"sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25}}}`)}},
		}}
	if _, err := env.cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cs.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	claimConfig := func(params string) resourcev1.DeviceClaimConfiguration {
		return resourcev1.DeviceClaimConfiguration{Requests: []string{"gpu"}, DeviceConfiguration: opaque(params)}
	}
	createClaimPod(t, ns, "share-mps", "gpu.nvidia.com", "", claimConfig(gpuConfig+
		`"sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi"}}}`))
	createClaimPod(t, ns, "share-ts", "gpu.nvidia.com", "", claimConfig(gpuConfig+
		`"sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}`))
	createClaimPod(t, ns, "share-class", class.Name, "")
	createClaimPod(t, ns, "share-bad", "gpu.nvidia.com", "", claimConfig(gpuConfig+
		`"sharing": {"strategy": "MPS", "mpsConfig": {"activeThreadPercentage": 50}}}`))

	claims := map[string]*resourcev1.ResourceClaim{}
	for _, name := range []string{"share-mps", "share-ts", "share-class", "share-bad"} {
		eventually(t, stageTimeout, "claim dra-"+name+" allocated with its configs", func() (bool, string) {
			cl, err := env.cs.ResourceV1().ResourceClaims(ns).Get(ctx, "dra-"+name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if cl.Status.Allocation == nil || len(cl.Status.Allocation.Devices.Config) != 1 {
				return false, fmt.Sprintf("allocation %+v", cl.Status.Allocation)
			}
			want := resourcev1.AllocationConfigSourceClaim
			if name == "share-class" {
				want = resourcev1.AllocationConfigSourceClass
			}
			if src := cl.Status.Allocation.Devices.Config[0].Source; src != want {
				return false, fmt.Sprintf("config source %s, want %s", src, want)
			}
			claims[name] = cl
			return true, ""
		})
	}

	conn, err := grpc.NewClient("unix://"+filepath.Join(n.root, "plugins", config.DRADriverName, "dra.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	plugin := drapb.NewDRAPluginClient(conn)
	ref := func(name string) *drapb.Claim {
		c := claims[name]
		return &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
	}
	resp, err := plugin.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
		ref("share-mps"), ref("share-ts"), ref("share-class"), ref("share-bad")}})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	result := func(name string) *drapb.NodePrepareResourceResponse { return resp.Claims[string(claims[name].UID)] }
	for _, name := range []string{"share-mps", "share-ts", "share-class"} {
		if r := result(name); r == nil || r.Error != "" || len(r.Devices) != 1 {
			t.Fatalf("prepare %s: %+v", name, r)
		}
	}
	if r := result("share-bad"); r == nil || !strings.Contains(r.Error, `unknown field "activeThreadPercentage"`) {
		t.Errorf("prepare share-bad: %+v, want the unknown field named", r)
	}
	// The claim's status says it too: its device's Ready condition, written by the plugin with
	// its own identity (RBAC resourceclaims/status patch) through the real API server.
	eventually(t, stageTimeout, "the device's Ready=False condition in claim dra-share-bad", func() (bool, string) {
		cl, err := env.cs.ResourceV1().ResourceClaims(ns).Get(ctx, "dra-share-bad", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range cl.Status.Devices {
			for _, c := range d.Conditions {
				if d.Driver == config.DRADriverName && c.Type == "Ready" && c.Status == metav1.ConditionFalse &&
					c.Reason == "InvalidDeviceConfig" && strings.Contains(c.Message, "activeThreadPercentage") {
					return cl.Status.Allocation != nil, ""
				}
			}
		}
		return false, fmt.Sprintf("status.devices %+v", cl.Status.Devices)
	})
	eventually(t, stageTimeout, "the refusal's Event on claim dra-share-bad", func() (bool, string) {
		evs, err := env.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=dra-share-bad"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "InvalidDeviceConfig" && strings.Contains(e.Message, "activeThreadPercentage") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})

	// Each MPS claim's daemon answers with its config's thread percentage: the claim's own,
	// and the DeviceClass's for the claim without one.
	for name, want := range map[string]string{"share-mps": "50.0", "share-class": "25.0"} {
		uuid := deviceUUID(t, n, claims[name])
		id := string(claims[name].UID) + "-" + shortHash(uuid)
		pipe := filepath.Join(n.mpsDir, "dra", id, "pipe")
		got, err := mpsControl(pipe, "get_default_active_thread_percentage")
		if err != nil || got != want {
			t.Errorf("%s: the claim's MPS control daemon answers %q %v, want %s", name, got, err, want)
		}
		specFile := filepath.Join(n.root, "cdi", config.DRAClaimCDIFilePrefix+string(claims[name].UID)+".json")
		b, err := os.ReadFile(specFile)
		if err != nil || !strings.Contains(string(b), "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps") || !strings.Contains(string(b), "/run/nvidia/mps/dra/"+id+"/pipe") {
			t.Errorf("%s: the claim's CDI spec lacks the MPS edits: %v\n%s", name, err, b)
		}
	}
	if got, want := readLog(n.smiLog), "compute-policy -i "+deviceUUID(t, n, claims["share-ts"])+" --set-timeslice=3"; got != want {
		t.Errorf("nvidia-smi was asked %q, want %q", got, want)
	}

	un, err := plugin.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{ref("share-mps"), ref("share-ts")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range un.Claims {
		if r.Error != "" {
			t.Errorf("unprepare: %s", r.Error)
		}
	}
	uuid := deviceUUID(t, n, claims["share-mps"])
	if _, err := mpsControl(filepath.Join(n.mpsDir, "dra", string(claims["share-mps"].UID)+"-"+shortHash(uuid), "pipe"), "get_default_active_thread_percentage"); err == nil {
		t.Error("the MPS control daemon of an unprepared claim still answers")
	}
	if got := readLog(n.smiLog); !strings.HasSuffix(got, "--set-timeslice=0") {
		t.Errorf("after unprepare nvidia-smi was asked %q, want the time-slice set back to 0", got)
	}
	// The class claim's daemon is stopped by its own unprepare.
	if _, err := plugin.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{ref("share-class")}}); err != nil {
		t.Fatal(err)
	}
}

// deviceUUID is the UUID of the claim's one allocated device, from the node's ResourceSlice.
func deviceUUID(t *testing.T, n *draNode, c *resourcev1.ResourceClaim) string {
	t.Helper()
	name := c.Status.Allocation.Devices.Results[0].Device
	for _, dev := range sliceDevices(draSlices(t, n.name)) {
		if dev.Name == name {
			return *dev.Attributes["uuid"].StringValue
		}
	}
	t.Fatalf("device %s is not in %s's slice", name, n.name)
	return ""
}

// shortHash is NVIDIA's suffix of a claim's MPS daemon id: the sha256 of its device UUIDs.
func shortHash(uuids string) string {
	h := sha256.Sum256([]byte(uuids))
	return hex.EncodeToString(h[:])[:5]
}

// mpsControl asks a claim's MPS control daemon, as an operator would with NVIDIA's program.
func mpsControl(pipe, command string) (string, error) {
	dir, err := os.MkdirTemp("", "mps-ctl-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bin, err := mpstest.Link(dir)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe)
	cmd.Stdin = strings.NewReader(command)
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

func readLog(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
