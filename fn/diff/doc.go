// Package diff summarises what a change of a GPUPolicy (or of a rendered tree) moves, for the
// pull request that makes it: a summary line, every version, per changed object the fields
// that moved and the DaemonSets whose pods it restarts, images per component, privileges added
// and removed, gates and node selectors, RBAC, and the containerd drop-in as a unified text diff. It warns
// when one change moves more than one of driver, CUDA, toolkit, the gpupolicy image and the
// Kubernetes version: the version matrix is the real constraint, and upgrades made together
// hide which one broke.
package diff
