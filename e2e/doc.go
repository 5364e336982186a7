// Package e2e is the end-to-end suite of gpupolicy: it renders the examples with real
// kustomize and the real function, applies them to a real control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler built from upstream, kwok for the
// nodes) with Flux's server-side-apply engine, and drives the node agent's real gate logic on
// fake GPU nodes. Run it with ./run.sh (or `make e2e`); see README.md.
package e2e
