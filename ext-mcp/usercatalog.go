package extmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/settings"
)

// The operator's server catalog: servers a user may add to their own
// servers by filling a form instead of pasting mcpServers JSON. An entry
// is shaped after the MCP registry's server.json: a title and
// description, either a remote (url, transport, headers) or a package
// (command, args, env), and the inputs it needs (name, description,
// isRequired, isSecret, default, format), which "{name}" placeholders in
// the url, header values, args and env values stand for.
//
// It lives in ext-mcp's config block because the servers it adds are
// ext-mcp's users' own servers: the same policy (userServers), address
// guard, sandbox and validator apply to them, and the host stays free of
// MCP.
//
// A user's entry is the settings section "catalog-<name>": a switch
// ("added"), the non-secret inputs (bound under "inputs") and a secret
// field per secret input, so no secret is ever in the settings. A secret
// input goes only in a header value or an env value, whole or in part
// (never in the url, command or args: an address is shown and logged, a
// process's arguments are readable by every user of the machine). The one
// in a remote's "Authorization": "Bearer {x}" or a package's
// "MCP_ACCESS_TOKEN": "{x}" is the token of the user's own server
// u_<name>, the secret token:u_<name>, the existing credential path; each
// other one is the secret input:u_<name>:<input> ([InputSecret]). Filled
// in, the server keeps "{x}" in those values; the secrets are put in only
// when the request is sent or the process started (the credential bound
// by [Extension.ownerSpec]), are redacted from errors and the process's
// output like the token, and a header holding one goes to the server's
// origin only. A required one the user has not set keeps the server
// waiting, its status naming the input.
//
// When the user's own list is read ([Extension.ownServers]) each added
// entry is filled in and joins it under its name, as if pasted (named
// under a key secret to the process, so that only these carry their
// entry's secret inputs); a server of the same name pasted there wins.

// SectionCatalogPrefix starts the ID of a catalog entry's settings section.
const SectionCatalogPrefix = "catalog-"

// The fields of a catalog entry's section.
const (
	CatalogAddedField  = "added"
	CatalogInputsField = "inputs"
)

// maxCatalog bounds the entries of a catalog (each is a section and a
// settings read per refresh of a user).
const maxCatalog = 100

// CatalogEntry is one server of the operator's catalog.
type CatalogEntry struct {
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	Remote      *CatalogRemote  `json:"remote,omitempty"`
	Package     *CatalogPackage `json:"package,omitempty"`
	Inputs      []CatalogInput  `json:"inputs,omitempty"`
}

// CatalogRemote is a remote server's template.
type CatalogRemote struct {
	// Type is "streamable-http" (the default; "http" too) or "sse".
	Type    string            `json:"type,omitempty"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
}

// CatalogPackage is a stdio server's template.
type CatalogPackage struct {
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

// CatalogInput is a value the user gives when adding the server.
type CatalogInput struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	IsRequired  bool   `json:"isRequired,omitempty"`
	IsSecret    bool   `json:"isSecret,omitempty"`
	Default     string `json:"default,omitempty"`
	// Format is "string" (the default), "number", "boolean" or
	// "filepath", as server.json says.
	Format string `json:"format,omitempty"`
}

var (
	inputName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	placeholder = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]{0,63})\}`)
	// formatPattern is a value of each format with a pattern (the form's
	// text pattern, matched whole); formatRE the same, anchored.
	formatPattern = map[string]string{"number": `-?[0-9]+(\.[0-9]+)?`, "boolean": `true|false`}
	formatRE      = map[string]*regexp.Regexp{
		"number":  regexp.MustCompile(`^(?:` + formatPattern["number"] + `)$`),
		"boolean": regexp.MustCompile(`^(?:` + formatPattern["boolean"] + `)$`),
	}
)

// placeholdersIn returns the input names {name} in v stands for, with
// their spans; a "${...}" is the list's own placeholder (placeholders.go),
// not an input.
func placeholdersIn(v string) (names []string, spans [][2]int) {
	for _, m := range placeholder.FindAllStringSubmatchIndex(v, -1) {
		if m[0] > 0 && v[m[0]-1] == '$' {
			continue
		}
		names = append(names, v[m[2]:m[3]])
		spans = append(spans, [2]int{m[0], m[1]})
	}
	return names, spans
}

// parseCatalog parses and validates the catalog block; every problem names
// the entry and the field.
func parseCatalog(raw json.RawMessage, errs *problems) map[string]CatalogEntry {
	top, ok := object(raw, "catalog", errs)
	if !ok {
		return nil
	}
	if len(top) > maxCatalog {
		errs.add("catalog", "has %d entries; at most %d", len(top), maxCatalog)
		return nil
	}
	out := map[string]CatalogEntry{}
	for _, name := range sortedKeys(top) {
		where := "catalog." + name
		if catalog.CheckServerName(name, true) != nil {
			errs.add(where, "the name must match %s", catalog.ServerNamePattern)
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(top[name]))
		dec.DisallowUnknownFields()
		var e CatalogEntry
		if err := dec.Decode(&e); err != nil {
			errs.add(where, "%s", strings.TrimPrefix(err.Error(), "json: "))
			continue
		}
		if checkEntry(name, e, errs) {
			out[name] = e
		}
	}
	return out
}

// checkEntry validates one entry; it reports whether it is sound.
func checkEntry(name string, e CatalogEntry, errs *problems) bool {
	where := "catalog." + name
	n := len(*errs)
	switch {
	case (e.Remote == nil) == (e.Package == nil):
		errs.add(where, "needs either remote or package, not both or neither")
		return false
	case e.Remote != nil && e.Remote.URL == "":
		errs.add(where+".remote.url", "is required")
	case e.Remote != nil && !slices.Contains([]string{"", "streamable-http", "http", "sse"}, e.Remote.Type):
		errs.add(where+".remote.type", "%q is not streamable-http or sse", clip(e.Remote.Type, 20))
	case e.Package != nil && e.Package.Command == "":
		errs.add(where+".package.command", "is required")
	}
	inputs := map[string]CatalogInput{}
	for i, in := range e.Inputs {
		w := fmt.Sprintf("%s.inputs[%d]", where, i)
		switch {
		case !inputName.MatchString(in.Name):
			errs.add(w+".name", "must match %s", inputName)
			continue
		case inputs[in.Name].Name != "":
			errs.add(w+".name", "%q is named twice", in.Name)
			continue
		}
		w = where + ".inputs." + in.Name
		inputs[in.Name] = in
		if re, ok := formatRE[in.Format]; ok {
			if in.Default != "" && !re.MatchString(in.Default) {
				errs.add(w+".default", "is not a %s", in.Format)
			}
		} else if in.Format != "" && in.Format != "string" && in.Format != "filepath" {
			errs.add(w+".format", "%q is not one of string, number, boolean, filepath", clip(in.Format, 20))
		}
		if in.IsSecret {
			if in.Default != "" {
				errs.add(w+".default", "a secret input has no default: it would be every user's secret")
			}
		}
	}
	// Every placeholder names an input; a secret input goes only in a
	// header value or an env value (see secretPlacement).
	used := map[string]bool{}
	scan := func(v, field, refused string) {
		names, _ := placeholdersIn(v)
		for _, n := range names {
			in, ok := inputs[n]
			if !ok {
				errs.add(field, "{%s} names no input", clip(n, 20))
				continue
			}
			used[in.Name] = true
			if in.IsSecret && refused != "" {
				errs.add(field, "uses the secret input %q: %s", in.Name, refused)
			}
		}
	}
	const (
		inURL  = "a secret may go only in a header value or an env value: an address is shown and logged (the status, the settings page, the server's own logs)"
		inArgs = "a secret may go only in an env value: a process's arguments are readable by every user of this machine (/proc/<pid>/cmdline)"
		inAuth = "the Authorization header may hold a secret only as \"Bearer {name}\" (the user's token for the server); put other keys in a header of their own"
		inTok  = "MCP_ACCESS_TOKEN may hold a secret only as \"{name}\" alone (the user's token for the server)"
	)
	isSecretRef := func(v, prefix string) bool {
		names, _ := placeholdersIn(v)
		return len(names) == 1 && v == prefix+"{"+names[0]+"}" && inputs[names[0]].IsSecret
	}
	if r := e.Remote; r != nil {
		scan(r.URL, where+".remote.url", inURL)
		for _, k := range sortedKeys(r.Headers) {
			v := r.Headers[k]
			refused := ""
			if strings.EqualFold(k, "Authorization") && !isSecretRef(v, "Bearer ") {
				refused = inAuth
			}
			scan(v, where+".remote.headers."+k, refused)
		}
	}
	if p := e.Package; p != nil {
		scan(p.Command, where+".package.command", inArgs)
		for i, a := range p.Args {
			scan(a, fmt.Sprintf("%s.package.args[%d]", where, i), inArgs)
		}
		for _, k := range sortedKeys(p.Env) {
			v := p.Env[k]
			refused := ""
			if k == "MCP_ACCESS_TOKEN" && !isSecretRef(v, "") {
				refused = inTok
			}
			scan(v, where+".package.env."+k, refused)
		}
	}
	for _, in := range e.Inputs {
		if inputs[in.Name].Name == in.Name && !used[in.Name] {
			errs.add(where+".inputs."+in.Name, "is used nowhere: no {%s} in the url, headers, args or env", in.Name)
		}
	}
	if len(*errs) > n {
		return false
	}
	// The server it makes must pass the users' own list's validator.
	vals := map[string]string{}
	for _, in := range e.Inputs {
		vals[in.Name] = map[string]string{"number": "1", "boolean": "true"}[in.Format]
		if vals[in.Name] == "" {
			vals[in.Name] = "x"
		}
	}
	s, err := e.fill(vals)
	if err == nil {
		var list []byte
		list, err = json.Marshal(map[string]any{"mcpServers": map[string]any{name: s}})
		if err == nil {
			_, err = ParseServerList(list)
		}
	}
	if err != nil {
		errs.add(where, "does not make a valid server of your users' own: %v", err)
		return false
	}
	return true
}

// title is the entry's name for people.
func (e CatalogEntry) title(name string) string {
	if e.Title != "" {
		return e.Title
	}
	return name
}

// tokenInput returns the secret input that is the user's token for the
// server (stored as [TokenSecret], the existing credential path): the one
// in a remote's "Authorization": "Bearer {x}" or a package's
// "MCP_ACCESS_TOKEN": "{x}"; "" when there is none. Its header or
// variable is left out of the filled server: the token is sent there.
func (e CatalogEntry) tokenInput() string {
	ref := func(v, prefix string) string {
		names, _ := placeholdersIn(v)
		if len(names) != 1 || v != prefix+"{"+names[0]+"}" {
			return ""
		}
		for _, in := range e.Inputs {
			if in.Name == names[0] && in.IsSecret {
				return in.Name
			}
		}
		return ""
	}
	if r := e.Remote; r != nil {
		for k, v := range r.Headers {
			if strings.EqualFold(k, "Authorization") {
				return ref(v, "Bearer ")
			}
		}
	}
	if p := e.Package; p != nil {
		if v, ok := p.Env["MCP_ACCESS_TOKEN"]; ok {
			return ref(v, "")
		}
	}
	return ""
}

// InputSecret is the name of the user's secret that holds the secret
// input of a catalog entry added as the user's own server (u_<name>),
// other than the token ([TokenSecret]).
func InputSecret(server, input string) string { return "input:" + server + ":" + input }

// secretName is the name of the user's secret of the entry's secret
// input in, added as own server.
func (e CatalogEntry) secretName(own string, in CatalogInput) string {
	if in.Name == e.tokenInput() {
		return TokenSecret(own)
	}
	return InputSecret(own, in.Name)
}

// fill returns the server entry (as a user's own list holds it) made from
// the user's values: each {input} replaced (an empty value by its
// default), the token's header or variable left out (the token is the
// user's token for the server). The other secret inputs stay "{name}" in
// the header and env values that hold them: they are replaced only when
// the request is sent or the process started ([secretSlots]), so no secret
// is in the filled server. An error names the input.
func (e CatalogEntry) fill(values map[string]string) (map[string]any, error) {
	vals := map[string]string{}
	var secretNames []string
	for _, in := range e.Inputs {
		if in.IsSecret {
			secretNames = append(secretNames, in.Name)
		}
	}
	for _, in := range e.Inputs {
		if in.IsSecret {
			continue
		}
		v := strings.TrimSpace(values[in.Name])
		if v == "" {
			v = in.Default
		}
		if v == "" && in.IsRequired {
			return nil, fmt.Errorf("%q is required", in.Name)
		}
		if re, ok := formatRE[in.Format]; ok && v != "" && !re.MatchString(v) {
			return nil, fmt.Errorf("%q must be a %s", in.Name, in.Format)
		}
		if strings.ContainsAny(v, "\x00\r\n") {
			return nil, fmt.Errorf("%q may not hold a line break", in.Name)
		}
		for _, sn := range secretNames {
			if strings.Contains(v, "{"+sn+"}") {
				return nil, fmt.Errorf("%q may not hold {%s}: it names a secret input", in.Name, sn)
			}
		}
		// A value is text: "${" in it is a literal, not a placeholder of
		// the list (placeholders.go).
		vals[in.Name] = strings.ReplaceAll(v, "${", "$${")
	}
	sub := func(v string) string {
		names, spans := placeholdersIn(v)
		var b strings.Builder
		last := 0
		for i, sp := range spans {
			b.WriteString(v[last:sp[0]])
			if val, ok := vals[names[i]]; ok {
				b.WriteString(val)
			} else {
				b.WriteString(v[sp[0]:sp[1]]) // a secret input: replaced later
			}
			last = sp[1]
		}
		b.WriteString(v[last:])
		return b.String()
	}
	token := e.tokenInput()
	out := map[string]any{}
	if r := e.Remote; r != nil {
		u := sub(r.URL)
		if _, err := url.Parse(u); err != nil {
			return nil, fmt.Errorf("the address made from your values does not parse")
		}
		out["url"] = u
		if r.Type == "sse" {
			out["type"] = "sse"
		} else {
			out["type"] = "http"
		}
		h := map[string]string{}
		for k, v := range r.Headers {
			if token == "" || !strings.EqualFold(k, "Authorization") {
				h[k] = sub(v)
			}
		}
		if len(h) > 0 {
			out["headers"] = h
		}
		return out, nil
	}
	p := e.Package
	out["command"] = p.Command
	if len(p.Args) > 0 {
		args := make([]string, len(p.Args))
		for i, a := range p.Args {
			args[i] = sub(a)
		}
		out["args"] = args
	}
	env := map[string]string{}
	for k, v := range p.Env {
		if token == "" || k != "MCP_ACCESS_TOKEN" {
			env[k] = sub(v)
		}
	}
	if len(env) > 0 {
		out["env"] = env
	}
	return out, nil
}

// secretSlots returns the entry's secret inputs other than the token,
// which stay "{name}" in the filled server's header and env values.
func (e CatalogEntry) secretSlots() []CatalogInput {
	token := e.tokenInput()
	var out []CatalogInput
	for _, in := range e.Inputs {
		if in.IsSecret && in.Name != token {
			out = append(out, in)
		}
	}
	return out
}

// withSecrets replaces the {name} of each secret input in v (a header or
// env value of a filled catalog server) by the user's secret.
func withSecrets(v string, secrets map[string]string) string {
	if len(secrets) == 0 || !strings.Contains(v, "{") {
		return v
	}
	names, spans := placeholdersIn(v)
	var b strings.Builder
	last := 0
	for i, sp := range spans {
		b.WriteString(v[last:sp[0]])
		if val, ok := secrets[names[i]]; ok {
			b.WriteString(val)
		} else {
			b.WriteString(v[sp[0]:sp[1]])
		}
		last = sp[1]
	}
	b.WriteString(v[last:])
	return b.String()
}

// checkCatalogPolicy reports catalog entries the users' policy would not
// run: none without userServers, a package without "all".
func (c *Config) checkCatalogPolicy(errs *problems) {
	if len(c.Catalog) == 0 {
		return
	}
	if !catalog.AllowsUserServers(c.UserServers) {
		errs.add("catalog", "needs userServers url or all: what it adds are the users' own servers")
		return
	}
	for _, name := range sortedKeys(c.Catalog) {
		if c.Catalog[name].Package != nil && !catalog.AllowsUserCommands(c.UserServers) {
			errs.add("catalog."+name+".package", "needs userServers all: the users' own servers may be remote only")
		}
	}
}

// catalogSections returns a section per catalog entry.
func catalogSections(cfg *Config) []settings.Section {
	var out []settings.Section
	for _, name := range sortedKeys(cfg.Catalog) {
		e := cfg.Catalog[name]
		own := catalog.UserServerName(name)
		var inputs []*settings.Node
		var secrets []*settings.Node
		for _, in := range e.Inputs {
			help := in.Description
			if in.IsRequired {
				help = strings.TrimSpace(help + " Required.")
			}
			if in.IsSecret {
				sn := e.secretName(own, in)
				secrets = append(secrets, settings.Secret(sn, in.Name).WithHelp(strings.TrimSpace(help+
					" Stored as your secret "+sn+"; never shown again.")))
				continue
			}
			n := settings.Text(in.Name, in.Name).WithMaxLength(2048)
			if help != "" {
				n.WithHelp(help)
			}
			if in.Default != "" {
				n.WithDefault(in.Default)
			}
			if p, ok := formatPattern[in.Format]; ok {
				// Empty passes: the switch may be off with nothing
				// filled in; a required one is checked when it is on.
				n.WithPattern(`(` + p + `)?`)
			}
			inputs = append(inputs, n)
		}
		nodes := []*settings.Node{settings.Toggle(CatalogAddedField, "In your servers").WithHelp(
			"Switch on and save to add it to your servers as " + own + " (its tools are named " + own + "/<tool>); switch off and save to remove it.").
			WithStatus(own)}
		if len(inputs) > 0 {
			nodes = append(nodes, settings.Group(CatalogInputsField, "Its settings", inputs...))
		}
		nodes = append(nodes, secrets...)
		desc := strings.TrimSpace(e.Description + " From the operator's catalog: fill in what it needs; it joins your own servers as if you had pasted it.")
		out = append(out, settings.Section{ID: SectionCatalogPrefix + name, Title: "Add " + e.title(name), Scope: settings.ScopeUser,
			Description: desc, Form: settings.NewForm(nodes...)})
	}
	return out
}

// catalogValues are a user's values of an entry's section.
type catalogValues struct {
	Added  bool              `json:"added"`
	Inputs map[string]string `json:"inputs"`
}

// decodeCatalogValues reads the section's values; numbers and booleans
// (a value stored through the API) are taken as their text.
func decodeCatalogValues(raw json.RawMessage) (catalogValues, error) {
	var v struct {
		Added  bool                       `json:"added"`
		Inputs map[string]json.RawMessage `json:"inputs"`
	}
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return catalogValues{}, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return catalogValues{}, err
	}
	out := catalogValues{Added: v.Added, Inputs: map[string]string{}}
	for k, r := range v.Inputs {
		var s string
		if json.Unmarshal(r, &s) != nil {
			s = strings.TrimSpace(string(r))
			if s == "null" {
				s = ""
			}
		}
		out.Inputs[k] = s
	}
	return out, nil
}

// validateCatalog checks a user's write of an entry's section: switched
// on, the inputs must fill the entry, and the name must be free in the
// user's pasted list.
func (x *Extension) validateCatalog(ctx context.Context, user, section string, values json.RawMessage) error {
	name := strings.TrimPrefix(section, SectionCatalogPrefix)
	x.mu.Lock()
	var e CatalogEntry
	var ok bool
	if x.cfg != nil {
		e, ok = x.cfg.Catalog[name]
	}
	x.mu.Unlock()
	if !ok {
		return nil // not ours: the host found no such form anyway
	}
	v, err := decodeCatalogValues(values)
	if err != nil {
		return ext.Mark(fmt.Errorf("the values of %q are not a JSON object: %w", e.title(name), err), ext.ErrInvalidArgument)
	}
	if !v.Added {
		return nil
	}
	if _, err := e.fill(v.Inputs); err != nil {
		return ext.Mark(fmt.Errorf("not added: %w", err), ext.ErrInvalidArgument)
	}
	pasted, err := x.pastedServers(ctx, user)
	if err != nil {
		return err
	}
	if _, taken := pastedNames(pasted)[name]; taken {
		return ext.Mark(fmt.Errorf("not added: your own list (Your MCP servers) already has a server named %q; remove it there first", name),
			ext.ErrInvalidArgument)
	}
	return nil
}

// pastedNames returns the names of a pasted list (none if it does not
// parse).
func pastedNames(raw json.RawMessage) map[string]bool {
	var top map[string]map[string]json.RawMessage
	_ = json.Unmarshal(raw, &top)
	out := map[string]bool{}
	for _, l := range top {
		for n := range l {
			out[n] = true
		}
	}
	return out
}

// withCatalog returns the user's pasted list with the catalog entries they
// added, filled in, under mcpServers (or servers, the key the list uses).
// A list that does not parse is returned as it is: its problem is
// reported, and nothing is added to it. An entry whose values no longer
// fill it (the operator changed it) is left out, with a log line.
func (x *Extension) withCatalog(ctx context.Context, h ext.Host, user string, pasted json.RawMessage, cat map[string]CatalogEntry) (json.RawMessage, error) {
	added := map[string]map[string]any{}
	for _, name := range sortedKeys(cat) {
		raw, err := readSetting(ctx, h, user, SectionCatalogPrefix+name)
		if err != nil {
			return nil, fmt.Errorf("reading the catalog entry %q of %q: %w", name, user, err)
		}
		v, err := decodeCatalogValues(raw)
		if err != nil || !v.Added {
			continue
		}
		s, err := cat[name].fill(v.Inputs)
		if err != nil {
			x.log.Warn("a catalog server a user added no longer fills", "server", name, "user", user, "error", err)
			continue
		}
		added[name] = s
	}
	if len(added) == 0 {
		return pasted, nil
	}
	top := map[string]json.RawMessage{}
	if t := bytes.TrimSpace(pasted); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &top); err != nil {
			return pasted, nil
		}
	}
	key := "mcpServers"
	if _, ok := top["servers"]; ok {
		if _, both := top["mcpServers"]; !both {
			key = "servers"
		}
	}
	list := map[string]json.RawMessage{}
	if raw, ok := top[key]; ok {
		if err := json.Unmarshal(raw, &list); err != nil {
			return pasted, nil
		}
	}
	names := pastedNames(pasted)
	keys := make([]string, 0, len(added))
	for n := range added {
		keys = append(keys, n)
	}
	sort.Strings(keys)
	for _, n := range keys {
		if names[n] {
			continue // the pasted one wins
		}
		b, err := json.Marshal(added[n])
		if err != nil {
			return nil, err
		}
		list[n] = b
	}
	b, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	top[key] = b
	// Which servers came from the catalog, for parseOwn (the key is
	// secret to this process: a pasted one would be refused as unknown).
	var fromCatalog []string
	for _, n := range keys {
		if !names[n] {
			fromCatalog = append(fromCatalog, n)
		}
	}
	if b, err = json.Marshal(fromCatalog); err != nil {
		return nil, err
	}
	top[x.catalogTag()] = b
	return json.Marshal(top)
}
