package v1alpha1

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const minimal = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
spec:
  kubernetesVersion: "1.34"
  driver: {version: "580.95.05"}
  cuda: {version: "12.10"}
`

func TestDecodeMinimalAndDefault(t *testing.T) {
	p, err := Decode([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.CUDA.Version != "12.10" {
		t.Fatalf("cuda.version = %q, want 12.10 kept as written", p.Spec.CUDA.Version)
	}
	Default(p)
	s := p.Spec
	checks := map[string][2]any{
		"namespace":        {s.Namespace, "gpu-system"},
		"gitops":           {s.GitOps, "argocd"},
		"containerd":       {s.ContainerRuntime.Version, "2.1"},
		"cdi":              {Bool(s.Toolkit.CDI), true},
		"setAsDefault":     {Bool(s.Toolkit.SetAsDefault), false},
		"replicas":         {*s.DevicePlugin.Sharing.TimeSlicing.Replicas, 1},
		"exporter.port":    {*s.Exporter.Port, 9400},
		"guardrails":       {Bool(s.Guardrails.Enabled), true},
		"nodeSelector":     {s.NodeSelector["nvidia.com/gpu.present"], "true"},
		"ignoredXIDs":      {len(s.DevicePlugin.HealthChecks.IgnoredXIDs), 6},
		"images.gpupolicy": {s.Images.GPUPolicy, DefaultGPUPolicyImage()},
	}
	for name, c := range checks {
		if !reflect.DeepEqual(c[0], c[1]) {
			t.Errorf("%s = %v, want %v", name, c[0], c[1])
		}
	}
}

func TestDefaultPoolsInheritAndStayIndependent(t *testing.T) {
	p, err := Decode([]byte(minimal + `  devicePlugin: {migStrategy: mixed, healthChecks: {ignoredXIDs: []}}
  nodePools:
  - name: inference
    nodeSelector: {pool: inference}
    devicePlugin: {sharing: {timeSlicing: {replicas: 4}}}
  - name: training
    nodeSelector: {pool: training}
`))
	if err != nil {
		t.Fatal(err)
	}
	Default(p)
	inf, tr := p.Spec.NodePools[0].DevicePlugin, p.Spec.NodePools[1].DevicePlugin
	if inf.Sharing.TimeSlicing.GetReplicas() != 4 || tr.Sharing.TimeSlicing.GetReplicas() != 1 {
		t.Errorf("replicas = %d/%d, want 4/1", inf.Sharing.TimeSlicing.GetReplicas(), tr.Sharing.TimeSlicing.GetReplicas())
	}
	if inf.MIGStrategy != "mixed" || tr.ResourceName != "nvidia.com/gpu" {
		t.Errorf("pool did not inherit spec.devicePlugin: %+v", inf)
	}
	if xids := tr.HealthChecks.IgnoredXIDs; xids == nil || len(xids) != 0 {
		t.Errorf("explicit empty ignoredXIDs must stay empty, got %v", xids)
	}
	*inf.Sharing.TimeSlicing.Replicas = 9
	if p.Spec.DevicePlugin.Sharing.TimeSlicing.GetReplicas() != 1 || tr.Sharing.TimeSlicing.GetReplicas() != 1 {
		t.Error("pools share nested values with spec.devicePlugin")
	}
}

// TestDefaultKeepsExplicitZero: a defaulted number set to 0 stays 0 (validation reports it);
// only an absent or null field takes the default. Before numbers were pointers, 0 became 1.
func TestDefaultKeepsExplicitZero(t *testing.T) {
	p, err := Decode([]byte(minimal + `  devicePlugin: {sharing: {timeSlicing: {replicas: 0}}}
  exporter: {port: 0}
  nodePools:
  - name: a
    nodeSelector: {pool: a}
    devicePlugin: {sharing: {timeSlicing: {replicas: 0}}}
  - name: b
    nodeSelector: {pool: b}
    devicePlugin: {sharing: {timeSlicing: {replicas: null}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	Default(p)
	s := p.Spec
	got := []int{s.DevicePlugin.Sharing.TimeSlicing.GetReplicas(), s.Exporter.GetPort(),
		s.NodePools[0].DevicePlugin.Sharing.TimeSlicing.GetReplicas(), s.NodePools[1].DevicePlugin.Sharing.TimeSlicing.GetReplicas()}
	if !reflect.DeepEqual(got, []int{0, 0, 0, 0}) {
		t.Errorf("replicas, port, pool a, pool b (inherits) = %v, want the explicit zeros kept: [0 0 0 0]", got)
	}
}

// TestDecodeNumberTooLarge: a number beyond int64 (YAML resolves it as a float) is reported
// as too large, with the field's range, not as a wrong type.
func TestDecodeNumberTooLarge(t *testing.T) {
	for _, v := range []string{"10000000000000000000", "1e30"} {
		_, err := Decode([]byte(minimal + "  devicePlugin: {sharing: {timeSlicing: {replicas: " + v + "}}}\n"))
		if err == nil || !strings.Contains(err.Error(), "spec.devicePlugin.sharing.timeSlicing.replicas") ||
			!strings.Contains(err.Error(), v+" is too large a number: use a whole number from 1 to 256") || strings.Contains(err.Error(), "float") {
			t.Errorf("replicas: %s: %v", v, err)
		}
	}
	if _, err := Decode([]byte(minimal + "  devicePlugin: {sharing: {timeSlicing: {replicas: 2.5}}}\n")); err == nil || !strings.Contains(err.Error(), "must be a whole number") {
		t.Errorf("replicas: 2.5: %v", err)
	}
}

func TestDecodeErrorsNameTheirPath(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string // substrings, each must appear in the error text
	}{
		{"unquoted version", strings.Replace(minimal, `"12.10"`, `12.10`, 1), []string{"spec.cuda.version", "quote it", `"12.10"`}},
		{"unknown field with hint", minimal + "  toolkit: {cdii: true}\n", []string{"spec.toolkit.cdii", `did you mean "cdi"`}},
		{"wrong type", minimal + "  exporter: {port: nine}\n", []string{"spec.exporter.port", "whole number"}},
		{"bool label value", minimal + "  nodeSelector: {gpu: true}\n", []string{"spec.nodeSelector[gpu]", "boolean"}},
		{"duplicate key", minimal + "  gitops: flux\n  gitops: none\n", []string{"spec.gitops", "Duplicate"}},
		{"wrong kind", strings.Replace(minimal, "kind: GPUPolicy", "kind: ClusterPolicy", 1), []string{"kind", "GPUPolicy"}},
		{"list where map", minimal + "  nodePools: {a: b}\n", []string{"spec.nodePools", "list"}},
		{"all at once", minimal + "  toolkit: {cdi: yes-please}\n  exporter: {port: x}\n", []string{"spec.toolkit.cdi", "spec.exporter.port"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.doc))
			var fe FieldErrors
			if !errors.As(err, &fe) {
				t.Fatalf("want FieldErrors, got %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestDecodeSyntaxAndShape(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":     "",
		"syntax":    "spec: [",
		"two docs":  minimal + "---\n" + minimal,
		"not a map": "- a\n",
	} {
		if _, err := Decode([]byte(doc)); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}
