package config

import "time"

// ToolkitStatus is the record in ToolkitStatusFile: the toolkit stage's verdict on the node,
// written by `gpu-node-agent toolkit install` (plugin/agent/toolkit) and read by the gate
// (plugin/nodefacts/hostfacts.Read). Verified is true only after the running containerd showed,
// through its CRI, the drop-in's handlers with the drop-in's settings, so the unprivileged
// gate can trust it without the containerd socket; otherwise Reason says why the last install
// did not get there.
type ToolkitStatus struct {
	// Verified: the gate may open (for this DropInSHA256 and Handlers only).
	Verified bool `json:"verified"`
	// Reason is why the last install was not verified ("" when Verified).
	Reason string `json:"reason,omitempty"`
	// Handlers are the runtime handlers of the drop-in that containerd has loaded (none
	// when not Verified).
	Handlers []string `json:"handlers"`
	// DropInSHA256 is the sha256 (hex) of the rendered drop-in (AgentToolkit.DropInSHA256).
	DropInSHA256 string `json:"dropInSHA256"`
	// InstalledSHA256 is the sha256 of the file in DropInDir (differs when merged).
	InstalledSHA256   string `json:"installedSHA256"`
	ContainerdVersion string `json:"containerdVersion"`
	VerifiedBy        string `json:"verifiedBy"`
	// Restarted: this install restarted containerd for InstalledSHA256; a run that finds the
	// same bytes not in effect does not restart again (each --watch interval would).
	Restarted bool      `json:"restarted,omitempty"`
	Time      time.Time `json:"time"`
}
