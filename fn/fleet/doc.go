// Package fleet compares the rendered output of many clusters, for the pull request that
// changes a fleet's shared base or one cluster's overlay: which clusters change, and in each the
// node pools and DaemonSets that move, whether containerd restarts on its GPU nodes, which
// driver containers are replaced and which pools' MIG layouts repartition GPUs, with the
// per-cluster findings of fn/diff (the upgrade window, privileges, RBAC). A fleet is a directory
// of one entry per cluster (a file of rendered objects, <cluster>.yaml, or a tree written by
// `gpupolicy-fn render -o`, <cluster>/), on disk or at a git revision.
package fleet
