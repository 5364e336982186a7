package config

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// write puts a config document where a loader can read it.
func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadDevicePlugin(t *testing.T) {
	p := write(t, `
pool: inference
resourceName: nvidia.com/gpu
migStrategy: mixed
deviceListStrategy: envvar
sharing: {timeSlicing: {replicas: 4}}
healthChecks: {enabled: true, ignoredXIDs: [13, 31], recoveryPeriod: 90s}
`)
	cfg, err := LoadDevicePlugin(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pool != "inference" || cfg.MIGStrategy != "mixed" || cfg.DeviceListStrategy != "envvar" ||
		cfg.Sharing.TimeSlicing.Replicas != 4 || len(cfg.HealthChecks.IgnoredXIDs) != 2 {
		t.Fatalf("cfg = %+v", cfg)
	}
	if d, _ := RecoveryPeriod(cfg); d.String() != "1m30s" {
		t.Fatalf("recovery period %s", d)
	}
	if d, _ := RecoveryPeriod(DefaultDevicePlugin()); d != DefaultRecoveryPeriod {
		t.Fatalf("default recovery period %s", d)
	}
}

func TestLoadDevicePluginErrorsNameFileAndField(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"resourceName: nvidia.com/gpu\nmigStrategy: none\nreplicas: 4\n", `unknown field "replicas"`},
		{"migStrategy: half\n", `field migStrategy: "half": want none, single or mixed`},
		{"deviceListStrategy: volume-mounts\n", `field deviceListStrategy: "volume-mounts": want cdi-cri or envvar`},
		{"resourceName: gpu\n", `field resourceName: "gpu" is not an extended resource name like nvidia.com/gpu`},
		{"sharing: {timeSlicing: {replicas: 0}}\n", "field sharing.timeSlicing.replicas"},
		{"sharing: {timeSlicing: {replicas: 10000}}\n", "field sharing.timeSlicing.replicas: 10000 is over the limit of 256"},
		{"healthChecks: {recoveryPeriod: soon}\n", "field healthChecks.recoveryPeriod"},
		{"sharing: {timeSlicing: {replicas: many}}\n", "replicas"},
		// An empty key ran the plugin with the defaults; a second document was dropped.
		{"", "the file holds no settings (empty, or comments only) (the file is rendered by gpupolicy-fn into ConfigMap gpu-device-plugin; re-render it, or leave --config empty for the defaults)"},
		{"# nothing\n", "the file holds no settings (empty, or comments only)"},
		{"---\n", "the file holds no settings"},
		{"migStrategy: none\n---\nmigStrategy: mixed\n", "line 2: a second YAML document: the config is one document (one ConfigMap key per pool)"},
	} {
		p := write(t, tc.body)
		_, err := LoadDevicePlugin(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want the file name and %q", tc.body, err, tc.want)
		}
	}
	if _, err := LoadDevicePlugin("/nonexistent/config.yaml"); err == nil || !strings.Contains(err.Error(), "/nonexistent/config.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// The defaults are handed out fresh: a caller that edits its copy (a pool's XID list) must not
// change what the next caller gets.
func TestDefaultsAreCopies(t *testing.T) {
	a := DefaultDevicePlugin()
	a.HealthChecks.IgnoredXIDs[0] = 0
	if DefaultIgnoredXIDs()[0] != 13 || DefaultDevicePlugin().HealthChecks.IgnoredXIDs[0] != 13 {
		t.Fatal("editing a default's XID list changed the default")
	}
}

// TestMaxResourceNameBytesBinds: in a directory as long as DefaultPluginDir, the socket of a
// MaxResourceNameBytes name binds and one byte more is refused by the kernel.
func TestMaxResourceNameBytesBinds(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp") // t.TempDir is longer than the plugin dir
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if len(dir) >= len(DefaultPluginDir) {
		t.Skipf("temporary directory %s is longer than %s", dir, DefaultPluginDir)
	}
	dir += "/" + strings.Repeat("d", len(DefaultPluginDir)-len(dir)-1)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := "nvidia.com/" + strings.Repeat("g", MaxResourceNameBytes-len("nvidia.com/"))
	lis, err := net.Listen("unix", filepath.Join(dir, SocketName(name)))
	if err != nil {
		t.Fatalf("a %d-byte resource name: %v", len(name), err)
	}
	lis.Close()
	if _, err := net.Listen("unix", filepath.Join(dir, SocketName(name+"g"))); err == nil {
		t.Fatalf("a %d-byte resource name bound: MaxResourceNameBytes is too small", len(name)+1)
	}
}
