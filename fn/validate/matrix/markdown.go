package matrix

import (
	"bytes"
	"fmt"
)

// Markdown renders the matrix as the reference table MATRIX.md, so reviewers read the same
// facts the validator checks, with their sources. A test keeps MATRIX.md in step with
// matrix.yaml.
func (m *Matrix) Markdown() []byte {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Version matrix\n\nGenerated from `fn/validate/matrix/matrix.yaml` (`go test ./fn/validate/matrix -update`); edit the YAML, not this file.\n\n")
	w("## CUDA major → minimum driver\n\nThe driver must be at least this version (error otherwise).\n\n| CUDA | Minimum driver | Source |\n|---|---|---|\n")
	for _, c := range m.CUDA {
		w("| %d.x | %s | %s |\n", c.Major, c.MinDriver, c.Source)
	}
	w("\n## Driver branch lifecycle\n\nA branch past its end of life draws a warning.\n\n| Branch | Type | End of life | Source |\n|---|---|---|---|\n")
	for _, d := range m.DriverBranches {
		w("| R%d | %s | %s | %s |\n", d.Branch, d.Type, d.EOL, d.Source)
	}
	w("\n## containerd\n\nOlder than %s, or a minor between two rows (it was never released): error. Newer than %s: warning, the newest facts apply.\n\n", m.Containerd[0].Minor, m.Containerd[len(m.Containerd)-1].Minor)
	w("| Minor | Config version | Imports merge plugin tables | CDI in CRI | Source |\n|---|---|---|---|---|\n")
	for _, c := range m.Containerd {
		w("| %s | %d | %s | %s | %s |\n", c.Minor, c.ConfigVersion, yesNo(c.ImportsMergePluginTables), yesNo(c.CDI), c.Source)
	}
	w("\n## nvidia-container-toolkit features\n\n| Feature | Minimum version | Source |\n|---|---|---|\n")
	for _, f := range m.Toolkit {
		w("| %s | %s | %s |\n", f.Feature, f.MinVersion, f.Source)
	}
	k := m.Kubernetes
	w("\n## Kubernetes\n\nOldest supported minor: %s (%s). Newest tested: %s (%s).\n\n", k.Minimum, k.MinimumSource, k.NewestTested, k.NewestTestedSource)
	w("| Feature | Needed by | On by default | GA | Source |\n|---|---|---|---|---|\n")
	for _, f := range k.Features {
		w("| %s | %s | %s | %s | %s |\n", f.Name, f.UsedBy, f.OnByDefault, f.GA, f.Source)
	}
	return b.Bytes()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
