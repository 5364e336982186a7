package render

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/fn/internal/yamlout"
)

// TestCheckSizesNamesObjectAndLimit: an object over etcd's request limit, or a ConfigMap over
// the API server's data limit, is an error naming the object and the limit; objects under
// them pass.
func TestCheckSizesNamesObjectAndLimit(t *testing.T) {
	cm := func(data int) Object {
		return Object{Obj: &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"),
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-agent", Namespace: "gpu-system"},
			Data:       map[string]string{"config.yaml": strings.Repeat("x", data-len("config.yaml"))}}}
	}
	ds := func(annotation int) Object {
		return Object{Obj: &appsv1.DaemonSet{TypeMeta: typeMeta("apps/v1", "DaemonSet"),
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-device-plugin", Namespace: "gpu-system",
				Annotations: map[string]string{"a": strings.Repeat("y", annotation)}}}}
	}
	if err := checkSizes(Objects{cm(MaxConfigMapDataBytes), ds(MaxObjectBytes - 400)}); err != nil {
		t.Fatalf("objects at the limits refused: %v", err)
	}
	err := checkSizes(Objects{cm(MaxConfigMapDataBytes + 1), ds(MaxObjectBytes)})
	for _, want := range []string{
		"ConfigMap gpu-system/gpu-node-agent holds 1.00 MiB (1048577 bytes) of data, over the API server's limit of 1 MiB for a ConfigMap",
		"DaemonSet gpu-system/gpu-device-plugin is 1.50 MiB (157", "over the API server's limit of 1.50 MiB (1572864 bytes) for one object",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
}

// yamlout.JSONSize counts exactly what json.Marshal would return, HTML escapes included.
func TestJSONSizeIsMarshalLength(t *testing.T) {
	for _, v := range []any{
		&corev1.ConfigMap{Data: map[string]string{"a": "<b>&é\u2028"}},
		map[string]any{"n": 1.5, "s": []string{"x", ""}},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := yamlout.JSONSize(v); err != nil || n != len(b) {
			t.Errorf("%T: JSONSize %d, %v; json.Marshal %d bytes", v, n, err, len(b))
		}
	}
}
