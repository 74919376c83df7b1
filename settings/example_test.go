package settings_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agenthost/agenthost/settings"
)

// An extension builds a section, the host parses and checks its form, and
// validates what a user submits.
func Example() {
	sec := settings.Section{
		ID:    "servers",
		Title: "MCP servers",
		Scope: settings.ScopeUser,
		Form: settings.NewForm(
			settings.Toggle("notes", "Notes").WithDefault(true),
			settings.Toggle("team", "Team tracker").WithDefault(false).
				WithWarning("A shared server hands your agent the operator's credential for it."),
			settings.Number("timeout", "Call timeout (s)").WithRange(1, 600).WithInteger(),
		),
	}
	raw, err := sec.MarshalForm() // what travels in ext.SettingsSection.Form
	if err != nil {
		fmt.Println(err)
		return
	}

	form, err := settings.ParseForm(raw) // on the host side
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("defaults:", string(settings.Defaults(form)))

	values, err := settings.ValidateValues(form, json.RawMessage(`{"team": true, "notes": false, "timeout": 30}`))
	fmt.Println("stored:", string(values), err)

	_, err = settings.ValidateValues(form, json.RawMessage(`{"team": "yes", "timeout": 0, "colour": "red"}`))
	var errs settings.FieldErrors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Printf("field %q: %s\n", e.Field, e.Msg)
		}
	}
	// Output:
	// defaults: {"notes":true,"team":false}
	// stored: {"notes":false,"team":true,"timeout":30} <nil>
	// field "": unknown field "colour"
	// field "team": must be true or false, not a string
	// field "timeout": must be at least 1 (got 0)
}

// A JSON editor checks its text against a schema generated from Go types.
func ExampleSchemaFor() {
	type server struct {
		Command string   `json:"command,omitempty"`
		Args    []string `json:"args,omitempty"`
		URL     string   `json:"url,omitempty" jsonschema:"format=uri"`
	}
	type servers struct {
		MCPServers map[string]server `json:"mcpServers"`
	}
	schema, err := settings.SchemaFor(servers{})
	if err != nil {
		fmt.Println(err)
		return
	}
	form := settings.NewForm(settings.JSONEditor("mine", "Your MCP servers", schema))

	_, err = settings.ValidateValues(form, json.RawMessage(`{"mine": "{\"mcpServers\": {\"x\": {\"comand\": \"run\"}}}"}`))
	fmt.Println(err)
	// Output:
	// mine: mcpServers.x: unknown field "comand"
}

// Secret fields are split off for the secrets store; the rest is settings.
func ExampleSplitSecrets() {
	form := settings.NewForm(
		settings.Text("user", "User name"),
		settings.Secret("token:github", "GitHub token"),
		settings.Secret("token:jira", "Jira token"),
	)
	plain, secrets, err := settings.SplitSecrets(form, json.RawMessage(`{"user": "ann", "token:github": "ghp_x", "token:jira": null}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("settings:", string(plain))
	for _, name := range settings.SecretNames(form) {
		switch v, ok := secrets[name]; {
		case !ok:
			fmt.Println(name, "unchanged")
		case v == nil:
			fmt.Println(name, "deleted")
		default:
			fmt.Println(name, "set")
		}
	}
	// Output:
	// settings: {"user":"ann"}
	// token:github set
	// token:jira deleted
}

// Update is an atomic read-modify-write of one user's section.
func ExampleOpenSQLite() {
	dir, err := os.MkdirTemp("", "settings-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	store, err := settings.OpenSQLite(filepath.Join(dir, "settings.db"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	ctx := context.Background()
	switchOff := func(old json.RawMessage) (json.RawMessage, error) {
		var v map[string]any
		if err := json.Unmarshal(old, &v); err != nil {
			return nil, err
		}
		v["notes"] = false
		return json.Marshal(v)
	}
	if err := store.Update(ctx, "mcp", "alice", "servers", switchOff); err != nil {
		fmt.Println(err)
		return
	}
	alice, _ := store.Get(ctx, "mcp", "alice", "servers")
	bob, _ := store.Get(ctx, "mcp", "bob", "servers")
	fmt.Println("alice:", string(alice))
	fmt.Println("bob:", string(bob))
	// Output:
	// alice: {"notes":false}
	// bob: {}
}
