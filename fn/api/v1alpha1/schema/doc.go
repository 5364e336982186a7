// Package schema holds the generated JSON Schema and CustomResourceDefinition of GPUPolicy
// v1alpha1, for editors (yaml-language-server), kubeconform and clusters that store policies.
// Both are written by fn/internal/schemagen from the Go types; never edit them by hand.
package schema

import _ "embed" // the generated files are embedded so tools can serve them without the repository

//go:generate go run ../../../internal/schemagen -api .. -out . -reference ../README.md

// JSONSchema is gpupolicy-v1alpha1.json: a draft-07 JSON Schema that rejects unknown fields,
// like the function's strict decoder.
//
//go:embed gpupolicy-v1alpha1.json
var JSONSchema []byte

// CRD is gpupolicy.dev_gpupolicies.yaml: the apiextensions.k8s.io/v1 CustomResourceDefinition.
//
//go:embed gpupolicy.dev_gpupolicies.yaml
var CRD []byte
