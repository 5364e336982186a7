package manifestcheck

import (
	"fmt"
	"strconv"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// ConfigVersion is the containerd config version a containerd minor ("1.7", "2.1") reads.
func ConfigVersion(containerdMinor string) (int64, error) {
	major, _, _ := strings.Cut(containerdMinor, ".")
	m, err := strconv.Atoi(major)
	if err != nil {
		return 0, fmt.Errorf("containerd version %q: want MAJOR.MINOR", containerdMinor)
	}
	return int64(config.ContainerdConfigVersion(m)), nil
}

// CheckDropIn finds the drop-in ConfigMap among objs and checks that its TOML parses, declares
// the config version containerdMinor reads, and defines the runtime handler.
func CheckDropIn(objs []Object, containerdMinor, handler string) error {
	var cm *corev1.ConfigMap
	for _, o := range objs {
		if c, ok := o.Typed.(*corev1.ConfigMap); ok && c.Name == config.DropInConfigMap {
			cm = c
		}
	}
	if cm == nil {
		return fmt.Errorf("no ConfigMap %q in the output", config.DropInConfigMap)
	}
	text, ok := cm.Data[config.DropInFile]
	if !ok {
		return fmt.Errorf("ConfigMap %q has no key %q", cm.Name, config.DropInFile)
	}
	var doc map[string]any
	if err := toml.Unmarshal([]byte(text), &doc); err != nil {
		return fmt.Errorf("%s: not valid TOML: %w", config.DropInFile, err)
	}
	want, err := ConfigVersion(containerdMinor)
	if err != nil {
		return err
	}
	if got, _ := doc["version"].(int64); got != want {
		return fmt.Errorf("%s: version = %v, containerd %s reads config version %d", config.DropInFile, doc["version"], containerdMinor, want)
	}
	path := []string{"plugins", config.CRIRuntimePlugin(int(want)), "containerd", "runtimes"}
	runtimes, ok := lookup(doc, path)
	if !ok {
		return fmt.Errorf("%s: no table %s for config version %d", config.DropInFile, strings.Join(path, "."), want)
	}
	if _, ok := runtimes[handler]; !ok {
		return fmt.Errorf("%s: runtime handler %q missing under %s", config.DropInFile, handler, strings.Join(path, "."))
	}
	return nil
}

func lookup(doc map[string]any, path []string) (map[string]any, bool) {
	cur := doc
	for _, k := range path {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}
