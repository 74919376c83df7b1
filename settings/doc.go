// Package settings owns agenthost's settings: the form descriptor (v1)
// that extensions use to describe their settings sections, the validation
// of values against those forms, JSON Schemas generated from Go types, and
// the [Store] that keeps each user's values.
//
// # Forms
//
// An extension describes each settings section as a [Section] whose [Form]
// is a tree of [Node]s: forms (groups, optionally binding their children's
// values under a key), toggles, text, longtext (optionally JSON checked
// against a JSON Schema), selects, numbers and write-only secrets. Build one
// with [NewForm] and the node constructors, and turn it into the raw JSON
// that travels in ext.SettingsSection with [Section.MarshalForm]; the host
// reads it back with [ParseForm], which refuses an unknown node type or
// any other mistake with an error that names the node's path. A toggle may
// name an entry of its extension's per-user status (Node.Status, e.g. the
// MCP server it switches), which the settings page shows beside it.
//
// # Values
//
// A section's values are one JSON object. [ValidateValues] checks them
// against the form and returns them normalized; its errors are
// [FieldErrors], one [*FieldError] per field, for a UI to show next to
// each field. Secret fields never reach the settings store: [SplitSecrets]
// separates them for the secrets store. [Defaults] gives the values a
// form starts with.
//
// # Schemas
//
// [SchemaFor] and [SchemaOf] generate a JSON Schema from a Go type with
// invopop/jsonschema; [CompileSchema] and [Schema.Validate] check JSON
// against one with google/jsonschema-go, reporting where in the value the
// problem is (`mcpServers.x: unknown field "comand"`).
//
// # Stores
//
// [Store] keeps values per extension, user and section. [NewMemoryStore]
// is for tests; [OpenSQLite] is the default, one SQLite file in WAL mode.
// Both pass the conformance suite in package settingstest.
//
// # Concurrency
//
// Forms, nodes and sections are plain values: do not change one while
// another goroutine reads it. Every function of this package may be called
// concurrently. A [Schema] may be used by any number of goroutines. Every
// [Store] method is safe for concurrent use; [Store.Update] is an atomic
// read-modify-write that loses no update however many goroutines (or
// processes, for the SQLite store) write the same section, and Close may
// be called more than once.
package settings
