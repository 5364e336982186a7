package render

// FastYAML is the emitter's output for m without the yaml.v3 fallback: a document (Go map
// style) or, with node, a sequence item in node style. ok is false where it leaves m to yaml.v3.
func FastYAML(m map[string]any, node bool) (out []byte, ok bool) {
	if node {
		e := newEmitter(styleNode)
		return e.buf, e.seqItem(m)
	}
	e := newEmitter(styleMap)
	return e.buf, e.document(m)
}

// ReferenceYAML is what yaml.v3 writes for the same input.
func ReferenceYAML(m map[string]any, node bool) ([]byte, error) {
	if !node {
		return marshalYAML(m)
	}
	return nodeItemYAML(m)
}
