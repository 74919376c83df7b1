package extmcp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
)

// Servers that wait for a user's sign-in. Such a server has no tools for
// that user (it could not list them), so without more an agent would
// never hear of it: a call of one of its tools is an unknown tool at the
// host. Each catalog published for a user therefore carries, for each of
// the user's servers S that waits for the user's own sign-in (no grant
// yet, or the grant was lost: [ext.StateNeedsSignIn]), the tool
// "S/sign_in" ([SignInTool]) and an instruction naming the servers that
// wait, with their links. A call of S/sign_in reaches the engine, which
// answers for a waiting server with the error result carrying the link,
// and CallTool turns that into the URL elicitation required error for a
// client that declared URL elicitation (signInRequired), as for any other
// call of the server. Once the sign-in is done the server connects, lists
// its real tools, and the next publish leaves the entry out (the host
// then sends tools/list_changed). A shared server is never offered this
// way: only the operator signs in to it.

// SignInTool is the name of the tool ("S/sign_in") a server S offers its
// user while it waits for the user's sign-in, in place of its own tools.
const SignInTool = "sign_in"

// signInSchema is the sign-in entry's input schema: no arguments.
var signInSchema = []byte(`{"type":"object","properties":{},"additionalProperties":false}`)

// signInAnnotations: the call only reports; it changes nothing and may be
// repeated.
var signInAnnotations = []byte(`{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}`)

// signInPublisher returns the publisher of an engine: it publishes each
// catalog with the sign-in entries and instruction of user's waiting
// servers (e, whose status says which wait, is read at the time of the
// publish; the engine publishes a user's catalogs one at a time, under
// the user's serialization, so the status read is the one the catalog was
// built from). Which servers are shared is read from the current config
// (a reload may change it in place).
func (x *Extension) signInPublisher(h ext.Host, e func() *catalog.Engine) catalog.Publisher {
	return catalog.PublisherFunc(func(ctx context.Context, user string, cat *ext.Catalog) error {
		if cat != nil {
			if eng := e(); eng != nil {
				x.mu.Lock()
				cfg := x.cfg
				x.mu.Unlock()
				cat = x.withSignIns(user, cat, waitingServers(eng, cfg, user))
			}
		}
		return h.SetUserCatalog(ctx, user, cat)
	})
}

// waitingServers returns the servers of user, in name order, that wait
// for the user's own sign-in (not shared ones: the operator signs in to
// those).
func waitingServers(e *catalog.Engine, cfg *Config, user string) []string {
	if user == OperatorUser {
		return nil
	}
	var out []string
	for _, st := range e.Status(user) {
		if st.State == ext.StateNeedsSignIn && !cfg.shared(st.Name) && !slices.Contains(out, st.Name) {
			out = append(out, st.Name)
		}
	}
	return out
}

// shared reports whether server is one of the operator's shared servers.
func (c *Config) shared(server string) bool {
	if c == nil || catalog.IsUserServer(server) {
		return false
	}
	shared := false
	c.each(func(n string, s Server) {
		shared = shared || (n == server && s.Credentials == catalog.CredentialsShared)
	})
	return shared
}

// withSignIns returns cat with the sign-in entry of each server of
// waiting and an instruction naming them; cat itself is not changed.
func (x *Extension) withSignIns(user string, cat *ext.Catalog, waiting []string) *ext.Catalog {
	if len(waiting) == 0 {
		return cat
	}
	x.mu.Lock()
	public, name := x.publicURL, x.name
	x.mu.Unlock()
	out := *cat
	out.Tools = slices.Clip(cat.Tools)
	out.Instructions = slices.Clip(cat.Instructions)
	var b strings.Builder
	b.WriteString("These MCP servers wait for the user to sign in with their account there; their tools are offered once the user has: ")
	for i, s := range waiting {
		out.Tools = append(out.Tools, ext.Tool{
			Name:  s + "/" + SignInTool,
			Title: "Sign in to " + s,
			Description: fmt.Sprintf("Sign in to MCP server %q: it waits for the user to sign in with their account there, "+
				"and its tools are offered once they have. Call this to get the sign-in link to show the user "+
				"(a client that supports URL elicitation opens it).", s),
			InputSchema: signInSchema,
			Annotations: signInAnnotations,
			Exposure:    ext.ExposureDirect,
			Replay:      ext.ReplaySafe,
		})
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", s)
		if public != "" {
			fmt.Fprintf(&b, " (%s)", ext.SignInURL(public, name, s))
		}
	}
	fmt.Fprintf(&b, ". To get a server's sign-in link, call its %s tool, then show the user the link; "+
		"or the user runs `agenthost auth login --user %s <server>`.", SignInTool, user)
	out.Instructions = append(out.Instructions, ext.Instruction{Source: name + " sign-in", Text: b.String()})
	return &out
}
