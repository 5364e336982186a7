// Package examples holds set-ups for kustomize, Argo CD and Flux, and their committed rendered
// output. Its tests keep that output honest: real kustomize runs the function in exec mode on
// examples/kustomize and must reproduce examples/rendered/ byte for byte, `gpupolicy-fn render`
// must reproduce examples/flux/gpu/, and every object in them must decode strictly against
// k8s.io/api.
package examples
