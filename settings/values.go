package settings

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ValidateValues checks a section's values against its form and returns
// them normalized: compact JSON with sorted keys, null fields dropped, and
// secret fields left out (they belong in the secrets store; get them with
// [SplitSecrets]). The form itself is checked first with [ValidateForm].
//
// Values are one JSON object: each value node's name maps to its value,
// and a form with Bind nests its children's values in an object under that
// key. Problems with the values are returned together as [FieldErrors]:
// an unknown field, a value of the wrong type or out of bounds, a select
// value that is not an option, a longtext with syntax "json" that does not
// parse or does not satisfy its schema, a required field that is missing.
// A missing field is not filled with its default: the store keeps only
// what the user set, and [Defaults] supplies the rest.
func ValidateValues(f Form, values json.RawMessage) (json.RawMessage, error) {
	if err := ValidateForm(f); err != nil {
		return nil, err
	}
	obj, err := decodeObject(values)
	if err != nil {
		return nil, FieldErrors{{Msg: err.Error()}}
	}
	var errs FieldErrors
	out := checkLevel(f.Root.Children, obj, "", &errs)
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *FieldError) int { return strings.Compare(a.Field, b.Field) })
		return nil, errs
	}
	return encodeCompact(out)
}

// SplitSecrets takes a section's values as a UI submits them and splits
// off the secret fields. plain is the rest of the values (for
// [ValidateValues] and the settings store); secrets maps each secret
// field present to its new value: a string sets the secret, a JSON null
// (a nil pointer) deletes it. A secret field that is absent is not in the
// map: leave that secret as it is. Keys are the fields' dotted paths, as
// [SecretNames] lists them. A secret value that is neither a string nor
// null is a [FieldErrors] error.
func SplitSecrets(f Form, values json.RawMessage) (plain json.RawMessage, secrets map[string]*string, err error) {
	if f.Root == nil {
		return nil, nil, invalidf("invalid form: root: missing")
	}
	obj, err := decodeObject(values)
	if err != nil {
		return nil, nil, FieldErrors{{Msg: err.Error()}}
	}
	secrets = map[string]*string{}
	var errs FieldErrors
	splitLevel(f.Root.Children, obj, "", secrets, &errs)
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b *FieldError) int { return strings.Compare(a.Field, b.Field) })
		return nil, nil, errs
	}
	plain, err = encodeCompact(obj)
	if err != nil {
		return nil, nil, err
	}
	return plain, secrets, nil
}

// SecretNames returns the dotted paths of the form's secret fields, in
// form order.
func SecretNames(f Form) []string {
	var names []string
	if f.Root == nil {
		return names
	}
	var walk func(children []*Node, prefix string)
	walk = func(children []*Node, prefix string) {
		for _, n := range children {
			switch {
			case n == nil:
			case n.Type == NodeForm && n.Bind != "":
				walk(n.Children, join(prefix, n.Bind))
			case n.Type == NodeForm:
				walk(n.Children, prefix)
			case n.Type == NodeSecret:
				names = append(names, join(prefix, n.Name))
			}
		}
	}
	walk(f.Root.Children, "")
	return names
}

// Defaults returns the object of the form's default values, nested like
// the values themselves; nodes without a default are absent. It is "{}"
// for a form without defaults. Defaults that are not valid JSON are
// skipped ([ValidateForm] reports them).
func Defaults(f Form) json.RawMessage {
	obj := map[string]any{}
	if f.Root != nil {
		obj = defaultsLevel(f.Root.Children)
	}
	b, err := encodeCompact(obj)
	if err != nil {
		return json.RawMessage("{}")
	}
	return b
}

func defaultsLevel(children []*Node) map[string]any {
	obj := map[string]any{}
	for _, n := range children {
		switch {
		case n == nil:
		case n.Type == NodeForm && n.Bind != "":
			if sub := defaultsLevel(n.Children); len(sub) > 0 {
				obj[n.Bind] = sub
			}
		case n.Type == NodeForm:
			for k, v := range defaultsLevel(n.Children) {
				obj[k] = v
			}
		case n.Default != nil && n.Name != "":
			if v, err := decodeJSON(n.Default); err == nil && v != nil {
				obj[n.Name] = v
			}
		}
	}
	return obj
}

// levelEntries flattens children into the keys of one object level: the
// children of unbound forms join the level, bound forms take one key.
func levelEntries(children []*Node, into map[string]*Node) map[string]*Node {
	if into == nil {
		into = map[string]*Node{}
	}
	for _, n := range children {
		switch {
		case n == nil:
		case n.Type == NodeForm && n.Bind == "":
			levelEntries(n.Children, into)
		case n.Type == NodeForm:
			into[n.Bind] = n
		default:
			into[n.Name] = n
		}
	}
	return into
}

// checkLevel validates obj against one object level and returns the
// normalized object.
func checkLevel(children []*Node, obj map[string]any, prefix string, errs *FieldErrors) map[string]any {
	entries := levelEntries(children, nil)
	out := map[string]any{}
	for _, k := range sortedKeys(obj) {
		if _, ok := entries[k]; !ok {
			*errs = append(*errs, &FieldError{Field: prefix, Msg: fmt.Sprintf("unknown field %q", k)})
		}
	}
	for _, k := range sortedKeys(entries) {
		n := entries[k]
		path := join(prefix, k)
		v, present := obj[k]
		if n.Type == NodeForm {
			var sub map[string]any
			switch v := v.(type) {
			case nil:
				sub = map[string]any{}
			case map[string]any:
				sub = v
			default:
				*errs = append(*errs, &FieldError{Field: path, Msg: "must be an object, not " + typeName(v)})
				continue
			}
			norm := checkLevel(n.Children, sub, path, errs)
			if present && v != nil {
				out[k] = norm
			}
			continue
		}
		if v == nil {
			if n.Required {
				*errs = append(*errs, &FieldError{Field: path, Msg: "required"})
			}
			continue
		}
		if n.Type == NodeSecret {
			if _, ok := v.(string); !ok {
				*errs = append(*errs, &FieldError{Field: path, Msg: "must be a string or null, not " + typeName(v)})
			}
			continue // never stored in settings
		}
		if msg := checkValue(n, v); msg != "" {
			*errs = append(*errs, &FieldError{Field: path, Msg: msg})
			continue
		}
		out[k] = v
	}
	return out
}

// splitLevel moves the secret fields of one object level out of obj.
func splitLevel(children []*Node, obj map[string]any, prefix string, secrets map[string]*string, errs *FieldErrors) {
	for k, n := range levelEntries(children, nil) {
		path := join(prefix, k)
		v, present := obj[k]
		switch {
		case !present:
		case n.Type == NodeForm:
			if sub, ok := v.(map[string]any); ok {
				splitLevel(n.Children, sub, path, secrets, errs)
			}
		case n.Type == NodeSecret:
			switch v := v.(type) {
			case nil:
				secrets[path] = nil
			case string:
				secrets[path] = &v
			default:
				*errs = append(*errs, &FieldError{Field: path, Msg: "must be a string or null, not " + typeName(v)})
			}
			delete(obj, k)
		}
	}
}

// checkValue checks one non-null value against a value node and returns
// what is wrong, or "".
func checkValue(n *Node, v any) string {
	switch n.Type {
	case NodeToggle:
		if _, ok := v.(bool); !ok {
			return "must be true or false, not " + typeName(v)
		}
	case NodeText, NodeLongText, NodeSecret:
		s, ok := v.(string)
		if !ok {
			return "must be a string, not " + typeName(v)
		}
		return checkString(n, s)
	case NodeSelect:
		s, ok := v.(string)
		if !ok {
			return "must be a string, not " + typeName(v)
		}
		for _, o := range n.Options {
			if o.Value == s {
				return ""
			}
		}
		return fmt.Sprintf("must be one of %s (got %q)", optionList(n.Options), s)
	case NodeNumber:
		return checkNumber(n, v)
	default:
		return fmt.Sprintf("a %s node holds no value", n.Type)
	}
	return ""
}

func checkString(n *Node, s string) string {
	if n.Required && s == "" {
		return "required"
	}
	if n.MaxLength > 0 {
		if c := utf8.RuneCountInString(s); c > n.MaxLength {
			return fmt.Sprintf("must be at most %d characters (got %d)", n.MaxLength, c)
		}
	}
	if n.Pattern != "" {
		re, err := compilePattern(n.Pattern)
		if err != nil {
			return fmt.Sprintf("the form's pattern %q does not compile: %v", n.Pattern, err)
		}
		if !re.MatchString(s) {
			return fmt.Sprintf("must match the pattern %q", n.Pattern)
		}
	}
	if n.Syntax == SyntaxJSON && s != "" { // "" is an empty editor
		var doc any
		if err := json.Unmarshal([]byte(s), &doc); err != nil {
			return "must be valid JSON: " + err.Error()
		}
		if n.Schema != nil {
			sch, err := compileCached(n.Schema)
			if err != nil {
				return "the form's schema is invalid: " + err.Error()
			}
			if err := sch.validate(doc); err != nil {
				return err.Error()
			}
		}
	}
	return ""
}

func checkNumber(n *Node, v any) string {
	var f float64
	switch v := v.(type) {
	case json.Number:
		var err error
		f, err = strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) {
			return fmt.Sprintf("%s is out of range", v)
		}
	case float64:
		f = v
	default:
		return "must be a number, not " + typeName(v)
	}
	if n.Integer && f != math.Trunc(f) {
		return fmt.Sprintf("must be a whole number (got %v)", v)
	}
	if n.Min != nil && f < *n.Min {
		return fmt.Sprintf("must be at least %g (got %v)", *n.Min, v)
	}
	if n.Max != nil && f > *n.Max {
		return fmt.Sprintf("must be at most %g (got %v)", *n.Max, v)
	}
	return ""
}

func optionList(opts []Option) string {
	var b strings.Builder
	for i, o := range opts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(o.Value))
	}
	return b.String()
}

// typeName is the JSON type of a decoded value.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// decodeObject decodes values, which must be one JSON object.
func decodeObject(values json.RawMessage) (map[string]any, error) {
	v, err := decodeJSON(values)
	if err != nil {
		return nil, fmt.Errorf("values are not valid JSON: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("values must be a JSON object, not %s", typeName(v))
	}
	return obj, nil
}

// encodeCompact encodes v as compact JSON with sorted keys and without
// HTML escaping.
func encodeCompact(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding values: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}
