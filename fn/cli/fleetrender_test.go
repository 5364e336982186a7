package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

const fleetBase = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata: {name: fleet}
spec:
  kubernetesVersion: "1.34"
  driver: {source: preinstalled, version: "580.95.05"}
  cuda: {version: "12.8"}
`

// writeFleet lays out DIR/base and one cluster per entry of clusters (name → the patch of its
// overlay's kustomization, after resources: [../../base]).
func writeFleet(t *testing.T, clusters map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"base/gpupolicy.yaml":     fleetBase,
		"base/kustomization.yaml": "resources: [gpupolicy.yaml]\n",
	}
	for c, k := range clusters {
		files["clusters/"+c+"/kustomization.yaml"] = "resources: [../../base]\n" + k
	}
	fntest.WriteFiles(t, root, files)
	return root
}

// TestFleetRenderAllOrNothing: every cluster with a problem is named (an overlay kustomize
// would refuse, a policy validation refuses), and nothing is written; the good clusters alone
// are not written either, so OUT never mixes two versions of the fleet.
func TestFleetRenderAllOrNothing(t *testing.T) {
	root := writeFleet(t, map[string]string{
		"good":   "",
		"broken": "patches:\n- patch: '{apiVersion: gpupolicy.dev/v1alpha1, kind: GPUPolicy, metadata: {name: typo}}'\n",
		"invalid": `patches:
- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata: {name: fleet}
    spec: {driver: {upgrade: {maxUnavailable: 1}}}
`,
	})
	out := filepath.Join(root, "out")
	code, _, stderr := fntest.Run(FleetRender, filepath.Join(root, "clusters"), "-o", out)
	if code != 1 {
		t.Fatalf("exit %d; want 1\n%s", code, stderr)
	}
	for _, want := range []string{
		"cluster broken: ", "no object matches the patch's gpupolicy.dev/v1alpha1 GPUPolicy typo",
		"cluster invalid: error: spec.driver.upgrade: is set but does nothing",
		"2 of 3 clusters have errors; nothing was written",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "cluster good") {
		t.Errorf("the good cluster is reported:\n%s", stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s was written (%v)", out, err)
	}
}

func TestFleetRenderRefusals(t *testing.T) {
	root := writeFleet(t, map[string]string{"a": ""})
	clusters := filepath.Join(root, "clusters")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"output inside the clusters", []string{clusters, "-o", filepath.Join(clusters, "out")}, 2, "where every directory is a cluster"},
		{"clusters inside the output", []string{clusters, "-o", root}, 2, "which fleet render replaces as a whole"},
		{"no DIR", []string{"-o", filepath.Join(root, "x")}, 2, "DIR and -o OUT are required"},
		{"no clusters", []string{filepath.Join(root, "base"), "-o", filepath.Join(root, "x")}, 1, "holds no cluster"},
		{"an output someone else wrote", []string{clusters, "-o", filepath.Join(root, "base")}, 1, "was not written by gpupolicy-fn render"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := fntest.Run(FleetRender, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

// TestFleetPushRefusals: what fleet push refuses before it talks to a registry.
func TestFleetPushRefusals(t *testing.T) {
	root := writeFleet(t, map[string]string{"a": ""})
	out := filepath.Join(root, "out")
	if code, _, stderr := fntest.Run(FleetRender, filepath.Join(root, "clusters"), "-o", out); code != 0 {
		t.Fatal(stderr)
	}
	meta := []string{"--source", "https://git.example.com/fleet", "--revision", "main@sha1:1"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no tag", append([]string{out, "oci://r.example.com/fleet"}, meta...), 2, "--tag are required"},
		{"not oci://", append([]string{out, "r.example.com/fleet", "--tag", "v1"}, meta...), 2, "give the repository prefix as oci://REGISTRY/PATH"},
		{"a tag in the URL", append([]string{out, "oci://r.example.com/fleet@sha256:1", "--tag", "v1"}, meta...), 2, "without tag or digest"},
		{"a bad tag", append([]string{out, "oci://r.example.com/fleet", "--tag", "-v1"}, meta...), 2, "is not an OCI tag"},
		{"a bad created time", append([]string{out, "oci://r.example.com/fleet", "--tag", "v1", "--created", "yesterday"}, meta...), 2, "is not an RFC 3339 time"},
		{"an unknown cluster", append([]string{out, "oci://r.example.com/fleet", "--tag", "v1", "--clusters", "a,b"}, meta...), 2, `--clusters names "b"`},
		{"not a render tree", append([]string{filepath.Join(root, "clusters"), "oci://127.0.0.1:1/fleet", "--tag", "v1", "--plain-http"}, meta...), 1, "is not a render tree"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := fntest.Run(FleetPush, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}
