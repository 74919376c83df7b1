package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	gjs "github.com/google/jsonschema-go/jsonschema"
	"github.com/invopop/jsonschema"
)

// SchemaFor returns the JSON Schema (draft 2020-12) of v's type, generated
// with invopop/jsonschema: one self-contained object schema with no $id,
// additionalProperties false on objects, and no $ref unless the type is
// recursive (then the recursive types are $refs into $defs), fit for a
// [JSONEditor] field and for go-sdk tool schemas.
//
// Describe fields with invopop tags (`jsonschema:"title=...,enum=a,enum=b"`,
// `jsonschema_description:"..."`). Two mistakes are refused with an error
// naming the field: a google-style tag (`jsonschema:"plain description"`,
// which invopop silently ignores), and a default on a required field of a
// nested object (google/jsonschema-go's ApplyDefaults would create the
// optional object to hold the default and then fail its required check).
func SchemaFor(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, errors.New("settings: SchemaFor: nil value")
	}
	return schemaForType(reflect.TypeOf(v))
}

// SchemaOf is [SchemaFor] for the type T.
func SchemaOf[T any]() (json.RawMessage, error) {
	return schemaForType(reflect.TypeFor[T]())
}

func schemaForType(t reflect.Type) (_ json.RawMessage, err error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	w := &typeWalk{active: map[reflect.Type]bool{}, done: map[reflect.Type]bool{}}
	if err := w.visit(t, t.Name()); err != nil {
		return nil, fmt.Errorf("generating schema for %s: %w", t, err)
	}
	defer func() {
		// invopop panics on types JSON cannot express (chan, func, ...).
		if r := recover(); r != nil {
			err = fmt.Errorf("generating schema for %s: %v", t, r)
		}
	}()
	r := &jsonschema.Reflector{ExpandedStruct: true, DoNotReference: true, Anonymous: true}
	if w.recursive {
		// Inlined, a recursive type would never end: keep its types in
		// $defs and lift the root's definition to the top (liftRoot).
		r = &jsonschema.Reflector{Anonymous: true}
	}
	raw, err := json.Marshal(r.ReflectFromType(t))
	if err != nil {
		return nil, fmt.Errorf("encoding schema for %s: %w", t, err)
	}
	if w.recursive {
		if raw, err = liftRoot(raw); err != nil {
			return nil, fmt.Errorf("generating schema for %s: %w", t, err)
		}
	}
	s, err := CompileSchema(raw)
	if err != nil {
		return nil, fmt.Errorf("generating schema for %s: %w", t, err)
	}
	if err := checkNestedDefaults(s.schema, "", 0); err != nil {
		return nil, fmt.Errorf("generating schema for %s: %w", t, err)
	}
	return raw, nil
}

// liftRoot turns {"$ref":"#/$defs/T","$defs":{...}} into T's definition
// with the $defs beside it, so that the root is an object schema (go-sdk
// wants one) while references to T still resolve.
func liftRoot(raw json.RawMessage) (json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	var ref string
	var defs map[string]json.RawMessage
	if err := json.Unmarshal(top["$ref"], &ref); err != nil {
		return nil, fmt.Errorf("the reflected schema has no root $ref: %w", err)
	}
	if err := json.Unmarshal(top["$defs"], &defs); err != nil {
		return nil, fmt.Errorf("the reflected schema has no $defs: %w", err)
	}
	def, ok := defs[strings.TrimPrefix(ref, "#/$defs/")]
	if !ok {
		return nil, fmt.Errorf("the reflected schema's root $ref %q is not in $defs", ref)
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(def, &root); err != nil {
		return nil, err
	}
	root["$schema"], root["$defs"] = top["$schema"], top["$defs"]
	return json.Marshal(root)
}

// invopopFlags are the bare (key-less) words invopop understands in a
// jsonschema tag.
var invopopFlags = map[string]bool{"required": true, "nullable": true, "-": true, "": true}

// typeWalk visits the struct types reachable from a type, refusing
// google-style jsonschema tags (a plain description, which invopop ignores
// without a word) and noting whether the type is recursive (invopop would
// expand a recursive type without end under DoNotReference).
type typeWalk struct {
	active, done map[reflect.Type]bool
	recursive    bool
}

func (w *typeWalk) visit(t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || w.done[t] {
		return nil
	}
	if w.active[t] {
		w.recursive = true
		return nil
	}
	w.active[t] = true
	defer func() { delete(w.active, t); w.done[t] = true }()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		fpath := path + "." + f.Name
		if tag, ok := f.Tag.Lookup("jsonschema"); ok {
			for _, part := range strings.Split(tag, ",") {
				if !strings.Contains(part, "=") && !invopopFlags[part] {
					return fmt.Errorf("field %s: jsonschema tag %q looks google-style, which invopop ignores; use jsonschema_description:%q", fpath, tag, tag)
				}
			}
		}
		if err := w.visit(f.Type, fpath); err != nil {
			return err
		}
	}
	return nil
}

// checkNestedDefaults refuses a default on a required property of a nested
// object schema (see LIBRARIES.md §4).
func checkNestedDefaults(s *gjs.Schema, path string, depth int) error {
	if s == nil {
		return nil
	}
	for _, name := range sortedKeys(s.Properties) {
		p := s.Properties[name]
		if depth > 0 && p.Default != nil && slices.Contains(s.Required, name) {
			return fmt.Errorf("field %s: a required field of a nested object has a default; make it optional or drop the default", pathJoin(path, name))
		}
		if err := checkNestedDefaults(p, pathJoin(path, name), depth+1); err != nil {
			return err
		}
	}
	if err := checkNestedDefaults(s.AdditionalProperties, path+".*", depth+1); err != nil {
		return err
	}
	return checkNestedDefaults(s.Items, path+"[]", depth+1)
}

// Schema is a compiled JSON Schema, ready to validate values. It is safe
// for concurrent use.
type Schema struct {
	schema   *gjs.Schema
	resolved *gjs.Resolved
	rootJSON any // the schema as decoded JSON, for inlining references
}

// CompileSchema parses and checks a JSON Schema (draft 2020-12 or
// draft-07) with google/jsonschema-go: raw must be a JSON object, its
// references must resolve within it (remote references are refused), and
// its defaults must satisfy their own subschemas.
func CompileSchema(raw json.RawMessage) (*Schema, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, invalidf("schema must be a JSON object")
	}
	var s gjs.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, invalidf("decoding schema: %v", err)
	}
	if err := checkTypes(&s, ""); err != nil {
		return nil, err
	}
	rs, err := s.Resolve(&gjs.ResolveOptions{ValidateDefaults: true})
	if err != nil {
		return nil, invalidf("resolving schema: %v", err)
	}
	var rootJSON any
	if err := json.Unmarshal(raw, &rootJSON); err != nil {
		return nil, invalidf("decoding schema: %v", err)
	}
	return &Schema{schema: &s, resolved: rs, rootJSON: rootJSON}, nil
}

var jsonTypes = map[string]bool{"null": true, "boolean": true, "object": true, "array": true, "number": true, "integer": true, "string": true}

// checkTypes refuses unknown "type" names, which google/jsonschema-go
// accepts and then fails every instance against.
func checkTypes(s *gjs.Schema, path string) error {
	var err error
	walkSchema(s, path, func(s *gjs.Schema, path string) {
		for _, t := range append([]string{s.Type}, s.Types...) {
			if t != "" && !jsonTypes[t] && err == nil {
				err = invalidf("unknown type %q at #%s", t, path)
			}
		}
	})
	return err
}

// walkSchema calls fn on s and every subschema, with its JSON Pointer.
func walkSchema(s *gjs.Schema, path string, fn func(*gjs.Schema, string)) {
	if s == nil {
		return
	}
	fn(s, path)
	one := func(k string, c *gjs.Schema) { walkSchema(c, path+"/"+k, fn) }
	list := func(k string, cs []*gjs.Schema) {
		for i, c := range cs {
			walkSchema(c, fmt.Sprintf("%s/%s/%d", path, k, i), fn)
		}
	}
	dict := func(k string, cs map[string]*gjs.Schema) {
		for _, name := range sortedKeys(cs) {
			walkSchema(cs[name], path+"/"+k+"/"+name, fn)
		}
	}
	dict("$defs", s.Defs)
	dict("definitions", s.Definitions)
	dict("dependencies", s.DependencySchemas)
	list("prefixItems", s.PrefixItems)
	one("items", s.Items)
	list("items", s.ItemsArray)
	one("additionalItems", s.AdditionalItems)
	one("contains", s.Contains)
	one("unevaluatedItems", s.UnevaluatedItems)
	dict("properties", s.Properties)
	dict("patternProperties", s.PatternProperties)
	one("additionalProperties", s.AdditionalProperties)
	one("propertyNames", s.PropertyNames)
	one("unevaluatedProperties", s.UnevaluatedProperties)
	list("allOf", s.AllOf)
	list("anyOf", s.AnyOf)
	list("oneOf", s.OneOf)
	one("not", s.Not)
	one("if", s.If)
	one("then", s.Then)
	one("else", s.Else)
	dict("dependentSchemas", s.DependentSchemas)
	one("contentSchema", s.ContentSchema)
}

// Validate checks value, which must be JSON, against the schema. The error
// is a [*FieldError] whose Field is the location in value of what is
// wrong, e.g. `mcpServers.x: unknown field "comand"`.
func (s *Schema) Validate(value json.RawMessage) error {
	if s == nil || s.resolved == nil {
		return errors.New("settings: Schema.Validate: schema not compiled (use CompileSchema)")
	}
	var doc any
	if err := json.Unmarshal(value, &doc); err != nil {
		return &FieldError{Msg: "not valid JSON: " + err.Error()}
	}
	return s.validate(doc)
}

// validate checks a decoded value (numbers as float64).
func (s *Schema) validate(doc any) error {
	err := s.resolved.Validate(doc)
	if err == nil {
		return nil
	}
	sch, rs := s.schema, s.resolved
	if hasRefs(sch) { // start from a copy without references, if possible
		if ss, srs := s.standalone(sch, doc); srs != nil && srs.Validate(doc) != nil {
			sch, rs = ss, srs
		}
	}
	loc, msg := s.locate(sch, rs, doc, "")
	if msg == "" {
		msg = innermost(err).Error()
	}
	return &FieldError{Field: loc, Msg: msg}
}

// locate finds where in v, which fails sch, the problem lies.
// google/jsonschema-go reports schema locations only, so locate walks the
// instance: it descends into the first child (in key or index order) that
// fails the subschema that applies to it, as long as that subschema can be
// checked on its own (it has no $ref), and describes the problem at the
// deepest failing spot.
func (s *Schema) locate(sch *gjs.Schema, rs *gjs.Resolved, v any, path string) (string, string) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(v) {
			for _, sub := range propertySchemas(sch, k) {
				if ss, srs := s.standalone(sub, v[k]); srs != nil && srs.Validate(v[k]) != nil {
					return s.locate(ss, srs, v[k], pathJoin(path, k))
				}
			}
		}
	case []any:
		for i, item := range v {
			if sub := itemSchema(sch, i); sub != nil {
				if ss, srs := s.standalone(sub, item); srs != nil && srs.Validate(item) != nil {
					return s.locate(ss, srs, item, fmt.Sprintf("%s[%d]", path, i))
				}
			}
		}
	}
	for _, sub := range sch.AllOf {
		if ss, srs := s.standalone(sub, v); srs != nil && srs.Validate(v) != nil {
			return s.locate(ss, srs, v, path)
		}
	}
	return path, leafMessage(sch, rs, v)
}

// propertySchemas returns the subschemas that apply to property k.
func propertySchemas(sch *gjs.Schema, k string) []*gjs.Schema {
	var subs []*gjs.Schema
	if p, ok := sch.Properties[k]; ok {
		subs = append(subs, p)
	}
	for _, re := range sortedKeys(sch.PatternProperties) {
		if m, err := regexp.MatchString(re, k); err == nil && m {
			subs = append(subs, sch.PatternProperties[re])
		}
	}
	if len(subs) == 0 && sch.AdditionalProperties != nil && !isFalse(sch.AdditionalProperties) {
		subs = append(subs, sch.AdditionalProperties)
	}
	return subs
}

// itemSchema returns the subschema that applies to item i of an array.
func itemSchema(sch *gjs.Schema, i int) *gjs.Schema {
	switch {
	case sch.ItemsArray != nil && i < len(sch.ItemsArray):
		return sch.ItemsArray[i]
	case sch.ItemsArray != nil:
		return sch.AdditionalItems
	case i < len(sch.PrefixItems):
		return sch.PrefixItems[i]
	}
	return sch.Items
}

// isFalse reports whether sch is the schema false, which
// google/jsonschema-go reads as {"not": {}}.
func isFalse(sch *gjs.Schema) bool {
	return sch.Not != nil && reflect.ValueOf(*sch.Not).IsZero()
}

// leafMessage says what is wrong with v against sch when no part of v is
// to blame on its own. It words the common cases itself and falls back on
// google/jsonschema-go's message.
func leafMessage(sch *gjs.Schema, rs *gjs.Resolved, v any) string {
	if msg := typeMessage(sch, v); msg != "" {
		return msg
	}
	if sch.Enum != nil && !slices.ContainsFunc(sch.Enum, func(e any) bool { return gjs.Equal(e, v) }) {
		vals := make([]string, len(sch.Enum))
		for i, e := range sch.Enum {
			vals[i] = jsonText(e)
		}
		return fmt.Sprintf("%s is not one of %s", jsonText(v), strings.Join(vals, ", "))
	}
	if sch.Const != nil && !gjs.Equal(*sch.Const, v) {
		return fmt.Sprintf("must be %s", jsonText(*sch.Const))
	}
	switch v := v.(type) {
	case float64:
		switch {
		case sch.Minimum != nil && v < *sch.Minimum:
			return fmt.Sprintf("must be at least %g (got %g)", *sch.Minimum, v)
		case sch.Maximum != nil && v > *sch.Maximum:
			return fmt.Sprintf("must be at most %g (got %g)", *sch.Maximum, v)
		case sch.ExclusiveMinimum != nil && v <= *sch.ExclusiveMinimum:
			return fmt.Sprintf("must be greater than %g (got %g)", *sch.ExclusiveMinimum, v)
		case sch.ExclusiveMaximum != nil && v >= *sch.ExclusiveMaximum:
			return fmt.Sprintf("must be less than %g (got %g)", *sch.ExclusiveMaximum, v)
		}
	case string:
		n := utf8.RuneCountInString(v)
		switch {
		case sch.MinLength != nil && n < *sch.MinLength:
			return fmt.Sprintf("must be at least %d characters (got %d)", *sch.MinLength, n)
		case sch.MaxLength != nil && n > *sch.MaxLength:
			return fmt.Sprintf("must be at most %d characters (got %d)", *sch.MaxLength, n)
		}
		if sch.Pattern != "" {
			if m, err := regexp.MatchString(sch.Pattern, v); err == nil && !m {
				return fmt.Sprintf("%q does not match the pattern %q", v, sch.Pattern)
			}
		}
	case []any:
		switch {
		case sch.MinItems != nil && len(v) < *sch.MinItems:
			return fmt.Sprintf("must have at least %d items (got %d)", *sch.MinItems, len(v))
		case sch.MaxItems != nil && len(v) > *sch.MaxItems:
			return fmt.Sprintf("must have at most %d items (got %d)", *sch.MaxItems, len(v))
		}
	case map[string]any:
		if sch.AdditionalProperties != nil && isFalse(sch.AdditionalProperties) {
			var unknown []string
			for _, k := range sortedKeys(v) {
				if len(propertySchemas(sch, k)) == 0 {
					unknown = append(unknown, strconv.Quote(k))
				}
			}
			switch len(unknown) {
			case 0:
			case 1:
				return "unknown field " + unknown[0]
			default:
				return "unknown fields " + strings.Join(unknown, ", ")
			}
		}
		var missing []string
		for _, r := range sch.Required {
			if _, ok := v[r]; !ok {
				missing = append(missing, strconv.Quote(r))
			}
		}
		switch len(missing) {
		case 0:
		case 1:
			return "missing required field " + missing[0]
		default:
			return "missing required fields " + strings.Join(missing, ", ")
		}
	}
	if err := rs.Validate(v); err != nil {
		return innermost(err).Error()
	}
	return ""
}

// typeMessage says how v's type differs from the one sch wants, or "".
func typeMessage(sch *gjs.Schema, v any) string {
	want := slices.DeleteFunc(append([]string{sch.Type}, sch.Types...), func(t string) bool { return t == "" })
	if len(want) == 0 {
		return ""
	}
	got := jsonType(v)
	for _, t := range want {
		if t == got || t == "number" && got == "integer" {
			return ""
		}
	}
	for i, t := range want {
		want[i] = article(t)
	}
	return fmt.Sprintf("must be %s, not %s", strings.Join(want, " or "), article(got))
}

// article prefixes a JSON type name with "a" or "an".
func article(t string) string {
	switch t {
	case "null":
		return t
	case "integer", "object", "array":
		return "an " + t
	}
	return "a " + t
}

// jsonText is v as compact JSON, for messages.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// jsonType is the JSON Schema type of a decoded value.
func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if v == math.Trunc(v) && !math.IsInf(v, 0) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// standalone returns sub in a form that can be checked apart from the
// root, with its resolution: sub itself when it holds no reference, else a
// copy with its local references inlined. It returns nils when that cannot
// be done (remote, dynamic or deeply recursive references).
func (s *Schema) standalone(sub *gjs.Schema, v any) (*gjs.Schema, *gjs.Resolved) {
	if sub == nil {
		return nil, nil
	}
	target := sub
	if hasRefs(sub) {
		if target = s.inline(sub, depthOf(v)+inlineSlack); target == nil {
			return nil, nil
		}
	}
	cp := *target
	cp.Schema = s.schema.Schema // keep the root's draft
	rs, err := cp.Resolve(nil)
	if err != nil {
		return nil, nil
	}
	return &cp, rs
}

func hasRefs(sch *gjs.Schema) bool {
	found := false
	walkSchema(sch, "", func(c *gjs.Schema, _ string) {
		found = found || c.Ref != "" || c.DynamicRef != ""
	})
	return found
}

// Inlining references would never end on a recursive schema, so it stops
// after as many nested references as the value is deep, plus
// inlineSlack for references that do not step into the value; beyond
// that a reference becomes the schema {}, which accepts anything, and
// locate stops short of the deepest spot rather than giving up.
// maxInlineNodes bounds the copy's size.
const (
	inlineSlack    = 8
	maxInlineNodes = 10000
)

// depthOf is how deeply v nests.
func depthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, c := range v {
			d = max(d, depthOf(c))
		}
		return d + 1
	case []any:
		for _, c := range v {
			d = max(d, depthOf(c))
		}
		return d + 1
	}
	return 0
}

// inline returns a copy of sub in which every local reference ("#/...")
// is replaced by an allOf holding a copy of its target, or nil.
func (s *Schema) inline(sub *gjs.Schema, maxDepth int) *gjs.Schema {
	b, err := json.Marshal(sub)
	if err != nil {
		return nil
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil
	}
	budget := maxInlineNodes
	out, ok := inlineRefs(doc, s.rootJSON, maxDepth, &budget)
	if !ok {
		return nil
	}
	if b, err = json.Marshal(out); err != nil {
		return nil
	}
	var res gjs.Schema
	if err := json.Unmarshal(b, &res); err != nil {
		return nil
	}
	return &res
}

// schemaData are the keywords whose values are data, not schemas.
var schemaData = map[string]bool{"enum": true, "const": true, "default": true, "examples": true, "required": true}

// inlineRefs copies node with its references inlined, at most depth deep.
func inlineRefs(node, root any, depth int, budget *int) (any, bool) {
	if *budget--; *budget < 0 {
		return nil, false
	}
	switch n := node.(type) {
	case []any:
		out := make([]any, len(n))
		for i, c := range n {
			v, ok := inlineRefs(c, root, depth, budget)
			if !ok {
				return nil, false
			}
			out[i] = v
		}
		return out, true
	case map[string]any:
		ref, isRef := n["$ref"].(string)
		out := make(map[string]any, len(n))
		for k, c := range n {
			switch {
			case k == "$ref" && isRef, k == "$defs", k == "definitions":
				continue // definitions are reached through the references
			case k == "$dynamicRef", k == "$id":
				return nil, false // scoping this package does not follow
			case schemaData[k]:
				out[k] = c
				continue
			}
			v, ok := inlineRefs(c, root, depth, budget)
			if !ok {
				return nil, false
			}
			out[k] = v
		}
		if isRef {
			if !strings.HasPrefix(ref, "#") {
				return nil, false
			}
			if depth <= 0 {
				return out, true
			}
			target, ok := jsonPointer(root, ref[1:])
			if !ok {
				return nil, false
			}
			t, ok := inlineRefs(target, root, depth-1, budget)
			if !ok {
				return nil, false
			}
			allOf, _ := out["allOf"].([]any)
			out["allOf"] = append(slices.Clone(allOf), t)
		}
		return out, true
	}
	return node, true
}

// jsonPointer looks up a URI-fragment JSON Pointer ("/a/b~1c") in doc.
func jsonPointer(doc any, ptr string) (any, bool) {
	ptr, err := url.PathUnescape(ptr)
	if err != nil {
		return nil, false
	}
	if ptr == "" {
		return doc, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false // an anchor
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch d := doc.(type) {
		case map[string]any:
			v, ok := d[tok]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(d) {
				return nil, false
			}
			doc = d[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// innermost returns the last error in err's chain: google/jsonschema-go
// wraps the actual problem in one "validating <schema path>" per level.
func innermost(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// identRE matches keys that read well after a dot in a path.
var identRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// pathJoin appends key k to a location path: "a.b", or `a["x y"]`.
func pathJoin(path, k string) string {
	if !identRE.MatchString(k) {
		return path + "[" + strconv.Quote(k) + "]"
	}
	if path == "" {
		return k
	}
	return path + "." + k
}

// schemaCache holds compiled schemas of form nodes by their text, so that
// validating values does not recompile them. It is bounded: forms are few,
// but nothing stops a caller from validating many different ones.
var (
	schemaCache     sync.Map // string -> *Schema
	schemaCacheSize atomic.Int32
)

const schemaCacheMax = 256

func compileCached(raw json.RawMessage) (*Schema, error) {
	if s, ok := schemaCache.Load(string(raw)); ok {
		return s.(*Schema), nil
	}
	s, err := CompileSchema(raw)
	if err != nil {
		return nil, err
	}
	if schemaCacheSize.Add(1) <= schemaCacheMax {
		schemaCache.Store(string(raw), s)
	}
	return s, nil
}
