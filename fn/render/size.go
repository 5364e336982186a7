package render

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/internal/yamlout"
)

// Limits of the API server on what it stores, checked before anything is written: a tree that
// holds an object over them renders, commits and then never applies.
const (
	// MaxObjectBytes is etcd's default request limit (--max-request-bytes, 1.5 MiB), which
	// bounds every object the API server stores.
	MaxObjectBytes = 3 << 19
	// MaxConfigMapDataBytes is the API server's limit on a ConfigMap's data and binaryData,
	// keys and values together (1 MiB).
	MaxConfigMapDataBytes = 1 << 20
)

// checkSizes refuses objects the API server would refuse for their size, naming each object
// and the limit.
func checkSizes(objs Objects) error {
	var errs []error
	for i, o := range objs {
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok {
			if n := configMapDataBytes(cm); n > MaxConfigMapDataBytes {
				errs = append(errs, fmt.Errorf("%s holds %s of data, over the API server's limit of %s for a ConfigMap: it would render but never apply; make the policy smaller (fewer node pools, shorter selectors)",
					o, sizeText(n), sizeText(MaxConfigMapDataBytes)))
				continue
			}
		}
		// The size is counted from the object's data, not written (every object is written
		// once more anyway), and that data is kept for the writing.
		m, err := yamlout.Map(o.Obj)
		if err != nil {
			return fmt.Errorf("%s: %w", o, err)
		}
		n, err := yamlout.DataJSONSize(m)
		if err != nil {
			return fmt.Errorf("%s: %w", o, err)
		}
		if n > MaxObjectBytes {
			errs = append(errs, fmt.Errorf("%s is %s as JSON, over the API server's limit of %s for one object (etcd's --max-request-bytes default): it would render but never apply; make the policy smaller (fewer node pools, selectors, tolerations or pull secrets)",
				o, sizeText(n), sizeText(MaxObjectBytes)))
		}
		objs[i].data = finish(m)
	}
	return errors.Join(errs...)
}

func configMapDataBytes(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	for k, v := range cm.BinaryData {
		n += len(k) + len(v)
	}
	return n
}

// sizeText is n bytes for a person, exact where it matters: "1.5 MiB (1572864 bytes)".
func sizeText(n int) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.2f MiB (%d bytes)", float64(n)/(1<<20), n)
}
