package agentcfg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const valid = `driver: {source: preinstalled, version: "580.95.05", enforce: exact}
cudaVersion: "12.8"
toolkit: {runtimeClassName: nvidia, dropInSHA256: 8d32d3c0925e245d5953ad43921355a74d29789c2359fc6a101fd0d723c186e1}
`

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	cfg, err := Load(write(t, valid))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := Interval(cfg); d != DefaultInterval {
		t.Fatalf("default interval %s", d)
	}
	cfg.Interval = "5s"
	if d, _ := Interval(cfg); d != 5*time.Second {
		t.Fatalf("interval %s", d)
	}
	for field, body := range map[string]string{
		"interval":                 valid + "interval: soon\n",
		"driver.version":           strings.Replace(valid, `version: "580.95.05"`, `version: ""`, 1),
		"driver.enforce":           strings.Replace(valid, "enforce: exact", "enforce: strict", 1),
		"toolkit.dropInSHA256":     strings.Replace(valid, "8d32d3c0925e245d5953ad43921355a74d29789c2359fc6a101fd0d723c186e1", "abc", 1),
		"toolkit.runtimeClassName": strings.Replace(valid, "runtimeClassName: nvidia", "runtimeClassName: \"\"", 1),
		"unknown field":            valid + "extra: 1\n",
	} {
		if _, err := Load(write(t, body)); err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(field, " field")) {
			t.Errorf("%s: %v", field, err)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.yaml")); err == nil || !strings.Contains(err.Error(), "ConfigMap gpu-node-agent") {
		t.Errorf("absent: %v", err)
	}
}
