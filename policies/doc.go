// Package policies holds ready-made GPUPolicy presets for common fleets, one YAML file each with
// comments that explain its choices. The package's tests decode, default, validate and render
// every preset, compare the output with the committed tree under testdata/<preset>/ and decode
// every rendered object strictly against k8s.io/api. Copy a preset, change the versions and the
// selectors, and render it with `gpupolicy-fn render -f POLICY -o DIR`.
package policies
