package yamlout_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	sigyaml "sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/internal/yamlout"
)

// checkSame compares the fast emitter with yaml.v3 for m in both styles; mustCover fails the
// test when the emitter leaves m to yaml.v3 (the rendered objects must all take the fast path).
func checkSame(t *testing.T, name string, m map[string]any, mustCover bool) {
	t.Helper()
	for _, node := range []bool{false, true} {
		want, err := yamlout.ReferenceYAML(m, node)
		got, ok := yamlout.FastYAML(m, node)
		if err != nil {
			if ok {
				t.Errorf("%s (node style %v): yaml.v3 fails (%v), the emitter does not", name, node, err)
			}
			continue
		}
		if !ok {
			if mustCover {
				t.Errorf("%s (node style %v): the emitter fell back to yaml.v3", name, node)
			}
			continue
		}
		if string(got) != string(want) {
			t.Errorf("%s (node style %v): emitter differs from yaml.v3\n--- emitter\n%s\n--- yaml.v3\n%s", name, node, got, want)
		}
	}
}

// TestEmitterMatchesYAMLv3OnGoldens: every object of every golden policy of fn/render, both
// styles. The objects are read back from the golden streams (which TestGolden there keeps
// equal to what Render writes), and the emitter must write each one's document exactly again.
func TestEmitterMatchesYAMLv3OnGoldens(t *testing.T) {
	goldens, err := filepath.Glob("../../render/testdata/*/expected.yaml")
	if err != nil || len(goldens) == 0 {
		t.Fatalf("no golden streams: %v", err)
	}
	for _, g := range goldens {
		stream, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		docs := strings.SplitAfter(string(stream), "\n---\n")
		for i, doc := range docs {
			doc = strings.TrimSuffix(doc, "---\n")
			name := fmt.Sprintf("%s document %d", g, i)
			j, err := sigyaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			m, ref, err := yamlout.MapPair(json.RawMessage(j))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !reflect.DeepEqual(m, ref) {
				t.Errorf("%s: the JSON decoder differs from encoding/json", name)
			}
			checkSame(t, name, m, true)
			if got, _ := yamlout.FastYAML(m, false); string(got) != doc {
				t.Errorf("%s: read back and written again, it differs from the golden\n--- emitter\n%s\n--- golden\n%s", name, got, doc)
			}
		}
	}
}

// TestEmitterMatchesYAMLv3OnEdgeCases: scalars and shapes at the edge of what the emitter
// decides itself; where it does not fall back, it must write what yaml.v3 writes.
func TestEmitterMatchesYAMLv3OnEdgeCases(t *testing.T) {
	scalars := []any{
		"", " ", "a", "yes", "Yes", "no", "on", "off", "y", "n", "true", "False", "NULL", "null", "~",
		"1", "1.0", "0x1F", "1e3", "+1", "-1", "-", "--", "---", "...", ".inf", "-.inf", ".nan",
		"1:20", "190:20:30", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "550.54.15", "v1.2.3",
		"a:b", "a:", "a: b", "a #b", "a#b", "#a", "a b", " a", "a ", "@a", "a@b", "!a", "&a", "*a",
		"%a", "|a", ">a", "'a'", "\"a\"", "a'b", "a\"b", "`a", "?a", "? a", "[a]", "{a}", "a,b", "a=b",
		"a+b", "a/b", "/a", "=a", "<<", "a\tb", "\ta", "é", "aé", "a\u0085b", "a\x01b", "\xff",
		"a\nb", "a\nb\n", "a\n\nb\n", "a\n\n", "\n", "\na", " a\nb", "a \nb", "a\n b", "a\n\tb",
		"a\nb ", "a\r\nb", "a\n\n\nb", "x:\n  y: [1, 2]\n", "a\u00e9\nb", strings.Repeat("x", 200),
		strings.Repeat("x y ", 60), "64Mi", "10m", "1.18.0", "580.95.05", "1.2", "1.2.", "1..2", "0x1F", "0x1g",
		"0b101", "0o17", "0b2", "0755", "1e5", "1E5", "1e5x", "2001-12-14", "2001-12-14t00:00:00Z", "2001-12-14x",
		"4ced9f", "4e12", "1_000", "1_000m", "1-2", "1/2", "1/2m", "/a", "/a:b", "/", "//", "/a b", "5m", "1Gi",
		"a b: c", "a b:c", "a b #c", "a b#c", "a b:", "(a) b", "(a)", ":a b", ": a", "? a b", "?a b", "- a", "-a b",
		"a 'b'", "'a' b", "a b ", " a b", "...a b", "..a b", "a  b", "a\tb c", "a b\x7f", "a b é", "{{ a }} b", "a {{ b }}",
		"x == 'y' || z", "a: b # c", "% a", "@a b", "`a b", "!a b", "&a b", "*a b", "|a b", ">a b", "[a] b", "]a b",
		"a, b", ",a b", "~ a", "Yes please", "true story", "null x", "a b: ", "#a b", "a # b", "a #", "a:#b c",
		"9.1.2-ubuntu22.04", "1.2.3.4", "12", "1.", "1.2.3a", int64(0), int64(-12), int64(1) << 62, true, false, nil, 0.5, 1e21,
	}
	for i, s := range scalars {
		name := fmt.Sprintf("scalar %d %q", i, s)
		checkSame(t, name, map[string]any{"k": s}, false)
		checkSame(t, name+" in a list", map[string]any{"k": []any{s, map[string]any{"a": s, "b": s}}}, false)
		if str, ok := s.(string); ok {
			checkSame(t, name+" as a key", map[string]any{str: "v", "z": map[string]any{str: int64(1)}}, false)
		}
	}
	checkSame(t, "shapes", map[string]any{
		"empty": map[string]any{}, "none": []any{}, "nested": map[string]any{"a": map[string]any{"b": []any{
			map[string]any{}, []any{}, map[string]any{"c": []any{"d", map[string]any{"e": "f\ng\n"}}}}}},
	}, true)
	checkSame(t, "key order", map[string]any{
		"a10": int64(1), "a2": int64(2), "a02": int64(3), "b": int64(4), "B": int64(5), "a-1": int64(6), "a_1": int64(7), "a.b": int64(8), "a/b": int64(9), "ab": int64(10), "a": int64(11),
		"1": int64(12), "10": int64(13), "9": int64(14), "x1y": int64(15), "x01y": int64(16), "é": int64(17), "z9z": int64(18), "z10a": int64(19),
	}, false)
}

// TestJSONDecoderMatchesEncodingJSON: escapes, numbers, nesting, empty containers.
func TestJSONDecoderMatchesEncodingJSON(t *testing.T) {
	for i, v := range []any{
		map[string]any{},
		map[string]any{"a": "x\"y\\z\n\t\u0001<>&\u2028é😀", "b\"": []any{}, "c": map[string]any{}},
		map[string]any{"n": []any{0, -1, 1.5, -2.25e-7, 1e300, 12345678901234567, uint64(1) << 63, 3.0, true, false, nil}},
		map[string]any{"deep": []any{[]any{map[string]any{"x": []any{"", " "}}}}},
		struct {
			A string  `json:"a"`
			B float64 `json:"b"`
			C []byte  `json:"c"`
		}{"\xff", 0.1, []byte("bytes")},
	} {
		fast, ref, err := yamlout.MapPair(v)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !reflect.DeepEqual(fast, ref) {
			t.Errorf("case %d: decoder %#v, encoding/json %#v", i, fast, ref)
		}
	}
}

// TestEmitterMatchesYAMLv3OnRandomStrings: short strings over YAML's special characters, as
// values, list items and keys (seeded, so a failure reproduces).
func TestEmitterMatchesYAMLv3OnRandomStrings(t *testing.T) {
	alphabet := []string{"a", "b", "y", "n", "e", "x", "o", "T", "Z", "0", "1", "9", " ", "  ", ":", "#", "-", ".",
		"\n", "'", "\"", "\t", "/", "{", "[", "]", ",", "!", "&", "*", "~", "+", "_", "é", "%", "@", "`", "?", "|", ">", "=", "\\"}
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		var b strings.Builder
		for range rnd.IntN(9) {
			b.WriteString(alphabet[rnd.IntN(len(alphabet))])
		}
		s := b.String()
		name := fmt.Sprintf("random %d %q", i, s)
		checkSame(t, name, map[string]any{"k": s, "l": []any{s}, s + "k": int64(1)}, false)
		if t.Failed() {
			return
		}
	}
}
