package render_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
)

// TestImagePinnedByDigest: spec.images.gpupolicy as REPOSITORY@sha256:<digest> (what the
// release example writes) is accepted and reaches every container that runs this project's
// image unchanged, mirrored like a tag when spec.registry is set.
func TestImagePinnedByDigest(t *testing.T) {
	const digest = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct{ registry, want string }{
		{"", "ghcr.io/gpupolicy/gpupolicy@" + digest},
		{"mirror.local/gpu", "mirror.local/gpu/gpupolicy/gpupolicy@" + digest},
	} {
		policy := `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata: {name: fleet}
spec:
  kubernetesVersion: "1.34"
  driver: {version: "580.95.05"}
  cuda: {version: "12.8"}
  registry: "` + tc.registry + `"
  images: {gpupolicy: "ghcr.io/gpupolicy/gpupolicy@` + digest + `"}
`
		_, objs, res := pipeline.Load([]byte(policy), today)
		if res.HasErrors() {
			t.Fatal(res.Text("policy.yaml"))
		}
		seen := 0
		for _, o := range objs {
			ds, ok := o.Obj.(*appsv1.DaemonSet)
			if !ok {
				continue
			}
			for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
				if strings.Contains(c.Image, "gpupolicy/gpupolicy") {
					seen++
					if c.Image != tc.want {
						t.Errorf("registry %q: %s container %s runs %s, want %s", tc.registry, ds.Name, c.Name, c.Image, tc.want)
					}
				}
			}
		}
		if seen == 0 {
			t.Fatal("no container runs the gpupolicy image")
		}
	}
}
