package yamlout

import (
	"encoding/json"
	"errors"
	"strconv"
)

// decodeJSONObject reads the output of json.Marshal for an object into JSON-compatible data,
// the way json.Decoder with UseNumber and json.Number.Int64, else Float64, read it (whole numbers int64,
// others float64, a repeated key: the last wins), without the reflection and the json.Number
// pass: it was a third of the cost of serializing an object. Strings with escapes go through
// encoding/json, so every unescaping rule is encoding/json's.
func decodeJSONObject(b []byte) (map[string]any, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// decodeJSON is decodeJSONObject for any JSON value (json.Marshal's compact output).
func decodeJSON(b []byte) (any, error) {
	d := jsonDecoder{b: b}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	if d.i != len(b) {
		return nil, errJSONSyntax
	}
	return v, nil
}

var errJSONSyntax = errors.New("malformed JSON")

type jsonDecoder struct {
	b []byte
	i int
}

// value reads one value; json.Marshal writes no whitespace, so there is none to skip.
func (d *jsonDecoder) value() (any, error) {
	if d.i >= len(d.b) {
		return nil, errJSONSyntax
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, errJSONSyntax
}

func (d *jsonDecoder) literal(word string) error {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return errJSONSyntax
	}
	d.i += len(word)
	return nil
}

func (d *jsonDecoder) object() (any, error) {
	d.i++ // {
	m := map[string]any{}
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, errJSONSyntax
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, errJSONSyntax
		}
		d.i++
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		m[k] = v
		if d.i >= len(d.b) {
			return nil, errJSONSyntax
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return m, nil
		default:
			return nil, errJSONSyntax
		}
	}
}

func (d *jsonDecoder) array() (any, error) {
	d.i++ // [
	s := []any{}
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return s, nil
	}
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		s = append(s, v)
		if d.i >= len(d.b) {
			return nil, errJSONSyntax
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return s, nil
		default:
			return nil, errJSONSyntax
		}
	}
}

// str reads a string; one without a backslash is its bytes (json.Marshal has made them valid
// UTF-8 and escaped every control character), others are left to encoding/json.
func (d *jsonDecoder) str() (string, error) {
	start := d.i
	escaped := false
	for j := start + 1; j < len(d.b); j++ {
		switch d.b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			d.i = j + 1
			if !escaped {
				return string(d.b[start+1 : j]), nil
			}
			var s string
			err := json.Unmarshal(d.b[start:j+1], &s)
			return s, err
		}
	}
	return "", errJSONSyntax
}

// number reads a number as json.Number.Int64, else Float64, would.
func (d *jsonDecoder) number() (any, error) {
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			d.i++
			continue
		}
		break
	}
	n := string(d.b[start:d.i])
	if i, err := strconv.ParseInt(n, 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil && !isRangeError(err) {
		return nil, errJSONSyntax
	}
	return f, nil
}

// isRangeError: json.Number.Float64 gives ParseFloat's ±Inf for out-of-range numbers too.
func isRangeError(err error) bool {
	var ne *strconv.NumError
	return errors.As(err, &ne) && ne.Err == strconv.ErrRange
}
