package pipeline

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// decodeResults turns an error of v1alpha1.Decode or DecodeNode into results: one per field
// error, or one whole-document error (YAML syntax, empty file).
func decodeResults(err error) validate.Results {
	if err == nil {
		return nil
	}
	var list v1alpha1.FieldErrors
	if !errors.As(err, &list) || len(list) == 0 {
		msg := err.Error()
		if strings.HasPrefix(msg, "YAML syntax") {
			msg += ": fix the YAML at that line (indentation, a missing ':' or an unclosed bracket or quote), e.g. with a YAML-aware editor"
		}
		return validate.Results{{Severity: validate.SeverityError, Message: msg}}
	}
	out := make(validate.Results, 0, len(list))
	for _, e := range list {
		out = append(out, validate.Result{Severity: validate.SeverityError, Field: e.Field, Message: decodeMessage(e)})
	}
	return out
}

// decodeMessage words a decoding error; apiVersion and kind get the exact line to write.
func decodeMessage(e *field.Error) string {
	switch {
	case e.Type == field.ErrorTypeNotSupported && e.Field == "apiVersion":
		return apiVersionMessage(fmt.Sprint(e.BadValue))
	case e.Type == field.ErrorTypeNotSupported && e.Field == "kind":
		return fmt.Sprintf("kind %q is not supported: write kind: %s", e.BadValue, v1alpha1.Kind)
	}
	switch e.Type {
	case field.ErrorTypeForbidden:
		return e.Detail
	case field.ErrorTypeDuplicate:
		return fmt.Sprintf("duplicate key %v", e.BadValue)
	case field.ErrorTypeTypeInvalid, field.ErrorTypeInvalid:
		if e.Detail != "" {
			return fmt.Sprintf("%s (found %v)", e.Detail, e.BadValue)
		}
	}
	return e.ErrorBody()
}

// apiVersionMessage names the group and version found and the ones expected.
func apiVersionMessage(found string) string {
	group, version, ok := strings.Cut(found, "/")
	if !ok {
		group, version = "", found // core group: "v1"
	}
	what := fmt.Sprintf("group %q, version %q", group, version)
	if group == v1alpha1.Group {
		what = fmt.Sprintf("version %q of group %s", version, group)
	}
	return fmt.Sprintf("apiVersion %q (%s) is not supported: a GPUPolicy is group %s, version %s; write apiVersion: %s", found, what, v1alpha1.Group, v1alpha1.Version, v1alpha1.APIVersion)
}

// renderResults words the few problems only rendering finds as validation results.
func renderResults(err error) validate.Results {
	var fe v1alpha1.FieldErrors
	if !errors.As(err, &fe) {
		return validate.Results{{Severity: validate.SeverityError, Message: err.Error()}}
	}
	out := make(validate.Results, 0, len(fe))
	for _, e := range fe {
		out = append(out, validate.Result{Severity: validate.SeverityError, Field: e.Field, Value: e.BadValue, Message: e.Detail})
	}
	return out
}
