// Package image tests the project's image as the nodes get it: bin/gpupolicy-image.tar (built
// by `make image`, e2e/hack/build-image.sh) imported into a real containerd, its tag and
// config checked against what bin/gpupolicy-fn renders, and run as a KRM function and as each
// node program. It needs no control plane, so `go test -run TestImage ./image` runs it alone.
package image
