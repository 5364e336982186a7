// Package yamlout writes the YAML that gpupolicy-fn outputs: rendered objects and node
// configs as files, and the KRM ResourceList. It is the one place that knows how those bytes
// are laid out (sorted keys, indent 2, sequences compact under their key, no line wrapping,
// so long CEL and PromQL stay on one line for review), which is what kustomize writes too.
//
// There are two paths, and both stay because they answer different needs with the same bytes:
//
//   - Encode is yaml.v3's encoder with those settings. It writes anything yaml.v3 can,
//     node trees with comments included, so the KRM function encodes its ResourceList with
//     it (passed-through items keep their comments) and the Writer falls back to it.
//   - Writer writes JSON-compatible data (what Map returns) directly, byte for byte what
//     Encode writes for it, at a fraction of yaml.v3's time and memory (BENCHMARKS.md); the
//     rendered objects take this path. Where it cannot be sure of yaml.v3's bytes it hands
//     that value to Encode, so a caller never sees which path ran.
//
// A Writer matches one of two yaml.v3 encodings (Form), and they cannot become one without
// changing every golden file on one side: the rendered files are what yaml.v3 writes for a Go
// map (YAML 1.1 look-alikes such as "yes" quoted, keys in yaml.v3's natural order), while the
// ResourceList's items are what it writes for node trees (Node: keys in byte order, only
// YAML 1.2 look-alikes quoted), as they were when the function built those trees.
package yamlout

// Form is what a Writer appends and which yaml.v3 encoding it matches.
type Form uint8

const (
	// Documents: each value is a document of a stream, separated by "---" lines, as
	// Encode writes a Go map: the rendered files and the node programs' config documents.
	Documents Form = iota
	// Items: each value is an item of a block sequence at column 0 ("- kind: ..."), as
	// Encode writes the tree Node builds in a top-level sequence: the KRM ResourceList's
	// items, spliced into the rest of the list that Encode wrote.
	Items
)

// Writer appends JSON-compatible values in one Form to a byte slice. The presentations of
// the scalars it had to ask yaml.v3 about are shared by every value of one Writer.
type Writer struct {
	form Form
	fast emitter
	docs int
}

// NewWriter returns a Writer that appends to dst (may be nil).
func NewWriter(form Form, dst []byte) *Writer {
	style := styleMap
	if form == Items {
		style = styleNode
	}
	return &Writer{form: form, fast: emitter{style: style, buf: dst, quoted: map[string]string{}}}
}

// Add appends m in the Writer's Form, through the direct path when it covers m and through
// Encode otherwise (same bytes either way).
func (w *Writer) Add(m map[string]any) error {
	if w.form == Documents && w.docs > 0 {
		w.fast.buf = append(w.fast.buf, "---\n"...)
	}
	w.docs++
	start := len(w.fast.buf)
	var ok bool
	if w.form == Items {
		ok = w.fast.seqItem(m)
	} else {
		ok = w.fast.document(m)
	}
	if ok {
		return nil
	}
	w.fast.buf = w.fast.buf[:start]
	y, err := encodeFallback(w.form, m)
	if err != nil {
		return err
	}
	w.fast.buf = append(w.fast.buf, y...)
	return nil
}

// Bytes is dst with everything added so far.
func (w *Writer) Bytes() []byte { return w.fast.buf }

// Document is m as one document on its own: a rendered file.
func Document(m map[string]any) ([]byte, error) {
	w := NewWriter(Documents, nil)
	if err := w.Add(m); err != nil {
		return nil, err
	}
	return w.Bytes(), nil
}

// Marshal is v through its JSON form (Map) as one document: a node program's config file.
func Marshal(v any) ([]byte, error) {
	m, err := Map(v)
	if err != nil {
		return nil, err
	}
	return Document(m)
}
