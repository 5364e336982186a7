package deviceplugin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	p := writeConfig(t, `
pool: inference
resourceName: nvidia.com/gpu
migStrategy: mixed
deviceListStrategy: envvar
sharing: {timeSlicing: {replicas: 4}}
healthChecks: {enabled: true, ignoredXIDs: [13, 31], recoveryPeriod: 90s}
`)
	cfg, err := deviceplugin.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pool != "inference" || cfg.MIGStrategy != "mixed" || cfg.DeviceListStrategy != "envvar" ||
		cfg.Sharing.TimeSlicing.Replicas != 4 || len(cfg.HealthChecks.IgnoredXIDs) != 2 {
		t.Fatalf("cfg = %+v", cfg)
	}
	if d, _ := deviceplugin.RecoveryPeriod(cfg); d.String() != "1m30s" {
		t.Fatalf("recovery period %s", d)
	}
}

func TestLoadConfigErrorsNameFileAndField(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"resourceName: nvidia.com/gpu\nmigStrategy: none\nreplicas: 4\n", `unknown field "replicas"`},
		{"migStrategy: half\n", "field migStrategy"},
		{"deviceListStrategy: volume-mounts\n", "field deviceListStrategy"},
		{"resourceName: gpu\n", "field resourceName"},
		{"sharing: {timeSlicing: {replicas: 0}}\n", "field sharing.timeSlicing.replicas"},
		{"healthChecks: {recoveryPeriod: soon}\n", "field healthChecks.recoveryPeriod"},
		{"sharing: {timeSlicing: {replicas: many}}\n", "replicas"},
	} {
		p := writeConfig(t, tc.body)
		_, err := deviceplugin.LoadConfig(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want the file name and %q", tc.body, err, tc.want)
		}
	}
	if _, err := deviceplugin.LoadConfig("/nonexistent/config.yaml"); err == nil || !strings.Contains(err.Error(), "/nonexistent/config.yaml") {
		t.Errorf("missing file: %v", err)
	}
}
