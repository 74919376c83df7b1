package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/audit"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/pins"
	"github.com/agenthost/agenthost/settings"
)

// fieldView is one form node as the template renders it.
type fieldView struct {
	Kind        string // a settings.NodeType
	ID          string // the input's id
	Name        string // the dotted path, the input's name
	Label       string
	Help        string
	Warning     string
	Placeholder string
	Required    bool

	Value    string // text, longtext, select, number
	Checked  bool   // toggle
	Options  []optionView
	Min, Max string
	Step     string
	Syntax   string
	Lang     string
	MaxLen   int
	Pattern  string

	// Status (toggle): the user's status entries the node names
	// (settings.Node.Status), shown beside the switch.
	Status []*fieldStatus

	SecretSet  bool   // secret: whether a value is stored
	ClearForm  string // secret: the id of its clear form
	Error      string // what is wrong with the submitted value
	HelpID     string
	WarningID  string
	ErrorID    string
	Children   []*fieldView
	IsFieldset bool // a group with a label
}

// DescribedBy lists the ids of the texts that describe the field.
func (f *fieldView) DescribedBy() string {
	var ids []string
	state := ""
	if f.Kind == string(settings.NodeSecret) {
		state = f.ID + "-state"
	}
	if len(f.Status) > 0 {
		state = f.ID + "-status"
	}
	for _, id := range []string{f.WarningID, state, f.HelpID, f.ErrorID} {
		if id != "" {
			ids = append(ids, id)
		}
	}
	return strings.Join(ids, " ")
}

// fieldStatus is one status entry shown beside the switch it belongs to;
// Connect, when set, is the id of the hidden form that starts its sign-in
// (a form cannot hold another).
type fieldStatus struct {
	api.StatusEntry
	Connect string
}

// connectForm is the hidden form of a Connect button inside a section.
type connectForm struct{ FormID, Action string }

type optionView struct {
	Value, Label string
	Selected     bool
}

// sectionView is one section's form.
type sectionView struct {
	Ext, ID, Title, Description string
	Anchor, Action, ClearAction string
	Submit                      string
	Fields                      []*fieldView
	Clears                      []clearView
	Connects                    []connectForm
	Error                       string // a problem not tied to a field
	Invalid                     bool   // the submission was refused
}

type clearView struct{ FormID, Name string }

// secretsView is an extension's list of stored secret names.
type secretsView struct {
	Ext, Anchor, SetAction, DeleteAction string
	Names                                []string
	Error                                string
	NameValue                            string
	NameError                            string
}

// settingsView is the whole /settings page.
type settingsView struct {
	Base, CSRF, User, MCPURL string
	Operator                 bool
	Flash, Error             string
	Sections                 []*sectionView
	Secrets                  []*secretsView
	Status                   []api.StatusEntry // the entries no switch shows
	StatusBeside             bool              // some are shown beside their switches
	StatusError              string
	CanConnect               bool   // Connect buttons start sign-ins (Options.SignIn)
	NeedsSignIn              string // the state that gets one
	Tools                    []api.Tool
	ToolsError               string
	Tokens                   []auth.Token
	TokensError              string
	Audit                    []audit.Record // the user's last 50 audit records, newest first
	AuditOn                  bool
	// Pins are the changed tools waiting for an approval: the user's own
	// (their own servers' they approve; the operator's they see), or for
	// the operator's session every user's changes of the operator's
	// servers.
	Pins                    []pins.View
	PinsOn                  bool
	SessionToken            string // the token this session came from
	NewToken, NewTokenName  string // a token just made, shown once
	TokenName, TokenNameErr string // a refused name
	// A refused scope or expiry: the fields as sent and their errors.
	TokenServers, TokenServersErr, TokenTools, TokenToolsErr, TokenExpires, TokenExpiresErr string
	Apps                                                                                    appsView
	Approvals                                                                               approvalsView
}

// submitted is a refused submission to re-render: the section, the
// posted form, and the errors by field path.
type submitted struct {
	ext, section string
	form         url.Values
	errs         map[string]string
	general      string
	// newToken is a token just created, to show once.
	newToken, newTokenName string
}

func (s *server) settingsPage(w http.ResponseWriter, r *http.Request) {
	s.renderSettings(w, r, http.StatusOK, nil, flashText(s, r))
}

// flashText turns the redirect's query into a fixed message; nothing from
// the query is shown as it is.
func flashText(s *server, r *http.Request) string {
	q := r.URL.Query()
	switch {
	case q.Get("saved") != "":
		ext, id, _ := strings.Cut(q.Get("saved"), "/")
		if sec, ok := s.userSection(r.Context(), ext, id); ok {
			return "Saved “" + sec.Title + "”."
		}
		return "Saved."
	case q.Get("cleared") != "":
		return "The secret was cleared."
	case q.Get("secret") == "set":
		return "The secret was stored."
	case q.Get("secret") == "deleted":
		return "The secret was deleted."
	case q.Get("token") == "revoked":
		return "The token was revoked."
	case q.Get("approval") == "approved":
		return "Approved: the call runs when your agent calls the tool again."
	case q.Get("approval") == "denied":
		return "Denied: the call will not run."
	case q.Get("app") == "revoked":
		return "The app was disconnected: its access ended at once."
	case q.Get("pin") == "approved":
		return "The change was approved: the tool is back."
	}
	return ""
}

// renderSettings renders the page for the session's user; sub, when not
// nil, is a refused submission shown with its values and errors.
func (s *server) renderSettings(w http.ResponseWriter, r *http.Request, code int, sub *submitted, flash string) {
	ws := sessionFrom(r.Context())
	v := &settingsView{Base: s.base, CSRF: ws.CSRF, User: ws.User, MCPURL: s.mcpURL(r), Operator: ws.Operator, Flash: flash,
		CanConnect: s.opts.SignIn != nil, NeedsSignIn: ext.StateNeedsSignIn}
	if ws.Operator {
		if p, err := s.pinner(); err == nil {
			if vs, err := p.Pins(r.Context(), "", "", false); err == nil {
				v.PinsOn = true
				for _, pv := range vs {
					if pv.ByOperator {
						v.Pins = append(v.Pins, pv)
					}
				}
			}
		}
		s.render(w, r, code, "settings.html", v)
		return
	}
	ctx := r.Context()
	// The tools first: listing them activates the user, so that the
	// status has their servers even on the first visit.
	if tools, err := s.h.Tools(ctx, ws.User); err != nil {
		_, v.ToolsError = s.hostErrStatus(r, err)
	} else {
		v.Tools = tools
	}
	var status []api.StatusEntry
	if st, err := s.h.Status(ctx, ws.User); err != nil {
		_, v.StatusError = s.hostErrStatus(r, err)
	} else {
		for _, e := range st {
			if e.User == ws.User { // never another user's line
				status = append(status, e)
			}
		}
	}
	// shown are the entries a switch shows; the status panel lists the
	// others.
	shown := map[statusKey]bool{}
	ids := 0
	exts := []string{}
	// secretExts are the extensions whose forms have a secret field: they,
	// and those that hold a secret of the user, get a "Stored secrets"
	// form; one that keeps no secret (hello) gets none.
	secretExts := map[string]bool{}
	for _, sec := range s.userSections(ctx) {
		if !slices.Contains(exts, sec.Extension) {
			exts = append(exts, sec.Extension)
		}
		sv := &sectionView{
			Ext: sec.Extension, ID: sec.ID, Title: sec.Title, Description: sec.Description,
			Anchor: anchor("s", sec.Extension, sec.ID),
			Action: s.path("/settings/" + url.PathEscape(sec.Extension) + "/" + url.PathEscape(sec.ID)),
		}
		sv.ClearAction = sv.Action + "/clear"
		v.Sections = append(v.Sections, sv)
		f, err := settings.ParseForm(sec.Form)
		if err != nil {
			sv.Error = "This section's form is invalid: " + err.Error()
			continue
		}
		sv.Submit = f.Root.Submit
		if len(settings.SecretNames(f)) > 0 {
			secretExts[sec.Extension] = true
		}
		b := &fieldBuilder{ids: &ids, anchor: sv.Anchor, ext: sec.Extension, status: status, shown: shown,
			connect: v.CanConnect, connectPath: s.path("/settings/connect/")}
		if sub != nil && sub.ext == sec.Extension && sub.section == sec.ID {
			// A refused submission shows what was posted; a failed clear
			// (no form) shows the stored values.
			sv.Error, sv.Invalid = sub.general, sub.form != nil
			b.form, b.errs = sub.form, sub.errs
		}
		if b.form == nil {
			b.obj = map[string]any{}
		}
		vals, err := s.h.GetSettings(ctx, ws.User, sec.Extension, sec.ID)
		if err != nil {
			_, msg := s.hostErrStatus(r, err)
			sv.Error = "Your settings could not be read: " + msg
			continue
		}
		b.secrets = vals.Secrets
		if b.obj != nil {
			b.obj = merged(settings.Defaults(f), vals.Values)
		}
		sv.Fields = b.build(f.Root.Children, "", b.obj)
		sv.Clears, sv.Connects = b.clears, b.connects
	}
	for _, e := range exts {
		sv := &secretsView{Ext: e, Anchor: anchor("secrets", e),
			SetAction:    s.path("/settings/_secrets/" + url.PathEscape(e)),
			DeleteAction: s.path("/settings/_secrets/" + url.PathEscape(e) + "/delete")}
		if sub != nil && sub.ext == e && sub.section == "" {
			sv.Error, sv.NameValue, sv.NameError = sub.general, sub.form.Get("name"), sub.errs["name"]
		}
		names, err := s.h.SecretNames(ctx, ws.User, e)
		if err != nil {
			_, msg := s.hostErrStatus(r, err)
			sv.Error = "Your secrets could not be listed: " + msg
		}
		if err == nil && len(names) == 0 && !secretExts[e] && sv.Error == "" {
			continue
		}
		sv.Names = names
		v.Secrets = append(v.Secrets, sv)
	}
	if vs, err := s.ownPins(ctx, ws.User, false); err == nil {
		v.PinsOn, v.Pins = true, vs
	}
	if _, ok := s.h.(Auditor); ok {
		if recs, err := s.ownAudit(ctx, ws.User, audit.Filter{Limit: 50}); err == nil {
			v.AuditOn = true
			slices.Reverse(recs)
			v.Audit = recs
		}
	}
	if toks, err := s.a.ListTokens(ctx, ws.User); err != nil {
		s.logger.Error("listing tokens", "err", err)
		v.TokensError = "Your tokens could not be listed; the host's log has the details."
	} else {
		v.Tokens, v.SessionToken = toks, ws.TokenID
	}
	if sub != nil && sub.ext == tokensTarget {
		v.NewToken, v.NewTokenName = sub.newToken, sub.newTokenName
		v.TokenName, v.TokenNameErr = sub.form.Get("name"), sub.errs["name"]
		v.TokenServers, v.TokenServersErr = sub.form.Get("servers"), sub.errs["servers"]
		v.TokenTools, v.TokenToolsErr = sub.form.Get("tools"), sub.errs["tools"]
		v.TokenExpires, v.TokenExpiresErr = sub.form.Get("expires"), sub.errs["expires"]
		if sub.general != "" {
			v.Error = sub.general
		}
	}
	v.Apps = s.connectedApps(ctx, ws.User)
	v.Approvals = s.waitingApprovals(ctx, ws.User)
	for _, e := range status {
		if !shown[statusKey{e.Extension, e.Name}] {
			v.Status = append(v.Status, e)
		}
	}
	v.StatusBeside = len(shown) > 0
	s.render(w, r, code, "settings.html", v)
}

var anchorUnsafe = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// anchor builds an element id from parts.
func anchor(parts ...string) string {
	for i, p := range parts {
		parts[i] = anchorUnsafe.ReplaceAllString(p, "_")
	}
	return strings.Join(parts, "-")
}

// merged returns the defaults overlaid with the stored values, decoded
// with json.Number so that numbers keep their text.
func merged(defaults, stored json.RawMessage) map[string]any {
	d, s := decodeObj(defaults), decodeObj(stored)
	var overlay func(dst, src map[string]any)
	overlay = func(dst, src map[string]any) {
		for k, v := range src {
			if sm, ok := v.(map[string]any); ok {
				if dm, ok := dst[k].(map[string]any); ok {
					overlay(dm, sm)
					continue
				}
			}
			dst[k] = v
		}
	}
	overlay(d, s)
	return d
}

func decodeObj(raw json.RawMessage) map[string]any {
	out := map[string]any{}
	if len(raw) == 0 {
		return out
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil || out == nil {
		return map[string]any{}
	}
	return out
}

// fieldBuilder turns form nodes into field views, from the stored values
// (obj) or from a refused submission (form, errs).
type fieldBuilder struct {
	ids    *int
	anchor string
	ext    string // the section's extension, whose status entries its switches name
	status []api.StatusEntry
	shown  map[statusKey]bool // the entries put beside a switch
	// connect: Connect buttons start sign-ins, at connectPath+ext/name.
	connect     bool
	connectPath string
	connects    []connectForm
	obj         map[string]any
	form        url.Values
	errs        map[string]string
	secrets     map[string]bool
	clears      []clearView
}

func (b *fieldBuilder) id() string {
	*b.ids++
	return "f" + strconv.Itoa(*b.ids)
}

func (b *fieldBuilder) build(nodes []*settings.Node, prefix string, obj map[string]any) []*fieldView {
	var out []*fieldView
	for _, n := range nodes {
		if n == nil {
			continue
		}
		if n.Type == settings.NodeForm {
			path, sub := prefix, obj
			if n.Bind != "" {
				path = join(prefix, n.Bind)
				if obj != nil {
					sub, _ = obj[n.Bind].(map[string]any)
					if sub == nil {
						sub = map[string]any{}
					}
				}
			}
			children := b.build(n.Children, path, sub)
			if n.Label == "" && n.Help == "" {
				out = append(out, children...)
				continue
			}
			g := &fieldView{Kind: "form", ID: b.id(), Label: n.Label, Help: n.Help, Children: children, IsFieldset: true}
			if g.Help != "" {
				g.HelpID = g.ID + "-help"
			}
			out = append(out, g)
			continue
		}
		out = append(out, b.field(n, join(prefix, n.Name), obj))
	}
	return out
}

func (b *fieldBuilder) field(n *settings.Node, path string, obj map[string]any) *fieldView {
	f := &fieldView{
		Kind: string(n.Type), ID: b.id(), Name: path, Label: n.Label, Help: n.Help, Warning: n.Warning,
		Placeholder: n.Placeholder, Required: n.Required, Syntax: n.Syntax, Lang: n.Lang, MaxLen: n.MaxLength,
		Pattern: n.Pattern,
	}
	if f.Label == "" {
		f.Label = n.Name
	}
	if f.Help != "" {
		f.HelpID = f.ID + "-help"
	}
	if f.Warning != "" {
		f.WarningID = f.ID + "-warning"
	}
	if msg, ok := b.errs[path]; ok {
		f.Error, f.ErrorID = msg, f.ID+"-error"
	}
	if n.Min != nil {
		f.Min = strconv.FormatFloat(*n.Min, 'g', -1, 64)
	}
	if n.Max != nil {
		f.Max = strconv.FormatFloat(*n.Max, 'g', -1, 64)
	}
	switch {
	case n.Step != nil:
		f.Step = strconv.FormatFloat(*n.Step, 'g', -1, 64)
	case n.Integer:
		f.Step = "1"
	default:
		f.Step = "any"
	}
	var raw any
	if obj != nil {
		raw = obj[n.Name]
	}
	switch n.Type {
	case settings.NodeToggle:
		if b.form != nil {
			f.Checked = b.form.Get(path) != ""
		} else {
			f.Checked, _ = raw.(bool)
		}
		if n.Status != "" {
			b.statusOf(f, n.Status)
		}
	case settings.NodeSecret:
		// Write-only: never pre-filled, not even after a refused submission.
		f.SecretSet = b.secrets[path]
		f.ClearForm = b.anchor + "-clear-" + strconv.Itoa(len(b.clears)+1)
		b.clears = append(b.clears, clearView{FormID: f.ClearForm, Name: path})
	default:
		if b.form != nil {
			f.Value = b.form.Get(path)
		} else {
			switch v := raw.(type) {
			case string:
				f.Value = v
			case json.Number:
				f.Value = v.String()
			}
		}
	}
	if n.Type == settings.NodeSelect {
		if !n.Required {
			f.Options = append(f.Options, optionView{Value: "", Label: "(not set)", Selected: f.Value == ""})
		}
		for _, o := range n.Options {
			label := o.Label
			if label == "" {
				label = o.Value
			}
			f.Options = append(f.Options, optionView{Value: o.Value, Label: label, Selected: o.Value == f.Value})
		}
	}
	return f
}

// statusKey names a status entry: its extension and its name.
type statusKey struct{ ext, name string }

// statusOf puts beside f the user's status entries named name of the
// section's extension, with a Connect button for one that needs sign-in.
func (b *fieldBuilder) statusOf(f *fieldView, name string) {
	for _, e := range b.status {
		if e.Extension != b.ext || e.Name != name {
			continue
		}
		fs := &fieldStatus{StatusEntry: e}
		if b.connect && e.State == ext.StateNeedsSignIn {
			fs.Connect = b.anchor + "-connect-" + strconv.Itoa(len(b.connects)+1)
			b.connects = append(b.connects, connectForm{FormID: fs.Connect,
				Action: b.connectPath + url.PathEscape(e.Extension) + "/" + url.PathEscape(e.Name)})
		}
		f.Status = append(f.Status, fs)
		b.shown[statusKey{e.Extension, e.Name}] = true
	}
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// formToValues turns a posted section form into the section's values
// object. Empty inputs are left out (not set); secret inputs left empty
// keep their secret. Numbers that do not parse are reported by path.
func formToValues(nodes []*settings.Node, prefix string, form url.Values, out map[string]any, errs map[string]string) {
	for _, n := range nodes {
		if n == nil {
			continue
		}
		if n.Type == settings.NodeForm {
			if n.Bind == "" {
				formToValues(n.Children, prefix, form, out, errs)
				continue
			}
			sub := map[string]any{}
			formToValues(n.Children, join(prefix, n.Bind), form, sub, errs)
			if len(sub) > 0 {
				out[n.Bind] = sub
			}
			continue
		}
		path := join(prefix, n.Name)
		v := form.Get(path)
		switch n.Type {
		case settings.NodeToggle:
			out[n.Name] = v != ""
		case settings.NodeNumber:
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			if !isJSONNumber(v) {
				errs[path] = "must be a number"
				continue
			}
			out[n.Name] = json.Number(v)
		case settings.NodeLongText:
			if v != "" {
				out[n.Name] = strings.ReplaceAll(v, "\r\n", "\n")
			}
		default: // text, select, secret
			if v != "" {
				out[n.Name] = v
			}
		}
	}
}

// isJSONNumber reports whether v is one JSON number.
func isJSONNumber(v string) bool {
	if v == "" || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(v), &n) == nil
}

// sectionForm finds the user section of the request and parses its form.
func (s *server) sectionForm(w http.ResponseWriter, r *http.Request) (api.Section, settings.Form, bool) {
	sec, ok := s.userSection(r.Context(), chi.URLParam(r, "ext"), chi.URLParam(r, "section"))
	if !ok {
		s.errorPage(w, r, http.StatusNotFound, "Not found", "There is no such settings section.")
		return sec, settings.Form{}, false
	}
	f, err := settings.ParseForm(sec.Form)
	if err != nil {
		s.logger.Error("an extension's settings form is invalid", "extension", sec.Extension, "section", sec.ID, "err", err)
		s.errorPage(w, r, http.StatusInternalServerError, "Invalid form", "This section's form is invalid; the host's log has the details.")
		return sec, settings.Form{}, false
	}
	return sec, f, true
}

func (s *server) saveSection(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	sec, f, ok := s.sectionForm(w, r)
	if !ok {
		return
	}
	sub := &submitted{ext: sec.Extension, section: sec.ID, form: r.PostForm, errs: map[string]string{}}
	values := map[string]any{}
	formToValues(f.Root.Children, "", r.PostForm, values, sub.errs)
	if len(sub.errs) > 0 {
		s.renderSettings(w, r, http.StatusBadRequest, sub, "")
		return
	}
	raw, err := json.Marshal(values)
	if err == nil {
		err = s.h.SetSettings(r.Context(), ws.User, sec.Extension, sec.ID, raw)
	}
	if err != nil {
		var fe settings.FieldErrors
		if errors.As(err, &fe) {
			paths := fieldPaths(f)
			for _, e := range fe {
				if p := owner(paths, e.Field); p != "" {
					if _, dup := sub.errs[p]; !dup {
						sub.errs[p] = fieldMessage(p, e)
					} else {
						sub.errs[p] += "; " + fieldMessage(p, e)
					}
					continue
				}
				sub.general = joinMsg(sub.general, e.Error())
			}
			s.renderSettings(w, r, http.StatusBadRequest, sub, "")
			return
		}
		code, msg := s.hostErrStatus(r, err)
		sub.general = "Not saved: " + msg
		s.renderSettings(w, r, code, sub, "")
		return
	}
	http.Redirect(w, r, s.path("/settings?saved="+url.QueryEscape(sec.Extension+"/"+sec.ID))+"#"+anchor("s", sec.Extension, sec.ID), http.StatusSeeOther)
}

// fieldPaths lists the dotted paths of a form's value nodes.
func fieldPaths(f settings.Form) []string {
	var out []string
	var walk func(nodes []*settings.Node, prefix string)
	walk = func(nodes []*settings.Node, prefix string) {
		for _, n := range nodes {
			switch {
			case n == nil:
			case n.Type == settings.NodeForm && n.Bind != "":
				walk(n.Children, join(prefix, n.Bind))
			case n.Type == settings.NodeForm:
				walk(n.Children, prefix)
			default:
				out = append(out, join(prefix, n.Name))
			}
		}
	}
	if f.Root != nil {
		walk(f.Root.Children, "")
	}
	return out
}

// owner finds the field an error path belongs to: the field itself, or the
// field it lies inside ("servers.mcpServers.x" or "list[2]").
func owner(paths []string, field string) string {
	best := ""
	for _, p := range paths {
		if (field == p || strings.HasPrefix(field, p+".") || strings.HasPrefix(field, p+"[")) && len(p) > len(best) {
			best = p
		}
	}
	return best
}

// fieldMessage is the message shown next to field p for e: e's message,
// with the part of the path below p when there is one.
func fieldMessage(p string, e *settings.FieldError) string {
	if rest := strings.TrimPrefix(e.Field, p); rest != "" {
		return strings.TrimPrefix(rest, ".") + ": " + e.Msg
	}
	return e.Msg
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// clearSecretField clears one secret field of a section.
func (s *server) clearSecretField(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	sec, f, ok := s.sectionForm(w, r)
	if !ok {
		return
	}
	name := r.PostForm.Get("name")
	if !slices.Contains(settings.SecretNames(f), name) {
		s.errorPage(w, r, http.StatusBadRequest, "Bad request", "This section has no such secret field.")
		return
	}
	if err := s.h.DeleteSecret(r.Context(), ws.User, sec.Extension, name); err != nil && !errors.Is(err, ext.ErrNotFound) {
		code, msg := s.hostErrStatus(r, err)
		s.renderSettings(w, r, code, &submitted{ext: sec.Extension, section: sec.ID, general: "Not cleared: " + msg}, "")
		return
	}
	http.Redirect(w, r, s.path("/settings?cleared=1")+"#"+anchor("s", sec.Extension, sec.ID), http.StatusSeeOther)
}

// setNamedSecret stores a secret by name, e.g. token:u_myserver for a
// server of the user's own list.
func (s *server) setNamedSecret(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	e := chi.URLParam(r, "ext")
	if !s.hasExtension(r.Context(), e) {
		s.errorPage(w, r, http.StatusNotFound, "Not found", "There is no such extension.")
		return
	}
	name, value := strings.TrimSpace(r.PostForm.Get("name")), r.PostForm.Get("value")
	sub := &submitted{ext: e, form: url.Values{"name": {name}}, errs: map[string]string{}}
	switch {
	case name == "":
		sub.errs["name"] = "enter the secret's name, e.g. token:u_myserver"
	case value == "":
		sub.general = "Enter the secret's value."
	}
	if len(sub.errs) > 0 || sub.general != "" {
		s.renderSettings(w, r, http.StatusBadRequest, sub, "")
		return
	}
	if err := s.h.SetSecret(r.Context(), ws.User, e, name, value); err != nil {
		code, msg := s.hostErrStatus(r, err)
		sub.general = "Not stored: " + msg
		s.renderSettings(w, r, code, sub, "")
		return
	}
	http.Redirect(w, r, s.path("/settings?secret=set")+"#"+anchor("secrets", e), http.StatusSeeOther)
}

func (s *server) deleteNamedSecret(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	e := chi.URLParam(r, "ext")
	if !s.hasExtension(r.Context(), e) {
		s.errorPage(w, r, http.StatusNotFound, "Not found", "There is no such extension.")
		return
	}
	if err := s.h.DeleteSecret(r.Context(), ws.User, e, r.PostForm.Get("name")); err != nil && !errors.Is(err, ext.ErrNotFound) {
		code, msg := s.hostErrStatus(r, err)
		s.renderSettings(w, r, code, &submitted{ext: e, form: url.Values{}, general: "Not deleted: " + msg}, "")
		return
	}
	http.Redirect(w, r, s.path("/settings?secret=deleted")+"#"+anchor("secrets", e), http.StatusSeeOther)
}
