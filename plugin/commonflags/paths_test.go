package commonflags

import (
	"flag"
	"strings"
	"testing"
)

func TestCheckAbsolutePaths(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("plugin-dir", "/var/lib/kubelet/device-plugins", "")
	fs.String("cdi-spec", "", "")
	if err := fs.Parse([]string{"--cdi-spec", "/var/run/cdi/nvidia.yaml"}); err != nil {
		t.Fatal(err)
	}
	if err := CheckAbsolutePaths(fs, "plugin-dir", "cdi-spec"); err != nil {
		t.Fatalf("absolute paths: %v", err)
	}
	_ = fs.Set("cdi-spec", "")
	if err := CheckAbsolutePaths(fs, "cdi-spec"); err != nil {
		t.Fatalf("empty means off: %v", err)
	}
	_ = fs.Set("plugin-dir", "device-plugins")
	err := CheckAbsolutePaths(fs, "cdi-spec", "plugin-dir")
	if want := `--plugin-dir "device-plugins" is a relative path: give an absolute path such as /var/lib/kubelet/device-plugins (the default)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("relative: %v, want %s", err, want)
	}
	_ = fs.Set("cdi-spec", "./nvidia.yaml")
	if err := CheckAbsolutePaths(fs, "cdi-spec"); err == nil || !strings.Contains(err.Error(), `--cdi-spec "./nvidia.yaml" is a relative path: give an absolute path such as /`) {
		t.Fatalf("relative without an absolute default: %v", err)
	}
}
