// Package version is the release of this module, a leaf both the function (fn/) and the node
// programs (plugin/) import, so neither imports the other for it. The function's default for
// spec.images.gpupolicy is derived from it, so a rendered tree pins the node programs that were
// tested with the function that rendered it.
package version

// Version is overridden at link time for releases (-X .../version.Version=v0.2.0).
var Version = "v0.1.0"

// Image is the repository of the one image that holds every binary of this module.
const Image = "ghcr.io/gpupolicy/gpupolicy"
