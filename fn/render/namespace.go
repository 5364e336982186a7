package render

import (
	corev1 "k8s.io/api/core/v1"
)

// renderNamespace makes spec.namespace with Pod Security labels. It must enforce the
// privileged level: the driver container loads kernel modules and the toolkit installer writes
// containerd's configuration and restarts it, so both run privileged with hostPID and hostPath
// mounts, which the baseline level rejects. Audit stays at baseline so the API server's audit
// log still records every pod here that uses a privilege; warn is left off because it would
// print the same expected warning on every sync of the driver and toolkit DaemonSets.
func renderNamespace(c *plan) (Objects, error) {
	m := c.meta(c.ns, false)
	for k, v := range map[string]string{
		"pod-security.kubernetes.io/enforce":         "privileged",
		"pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/audit":           "baseline",
		"pod-security.kubernetes.io/audit-version":   "latest",
	} {
		m.Labels[k] = v
	}
	return Objects{{Stage: StagePrereqs, Component: "namespace", Obj: &corev1.Namespace{
		TypeMeta:   typeMeta("v1", "Namespace"),
		ObjectMeta: m,
	}}}, nil
}
