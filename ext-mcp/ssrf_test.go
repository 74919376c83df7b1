package extmcp_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/settings"
)

// canaryListener is an HTTP server that must never be reached: it counts
// every connection accepted, before any byte of a request is read.
type canaryListener struct {
	URL  string // http://ip:port
	Addr string // ip:port
	hits atomic.Int64
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// newCanary listens on ip (port 0) and counts what reaches it.
func newCanary(t *testing.T, ip string) *canaryListener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the canary listener on %s is missing: %v", ip, err)
		}
		t.Skipf("SKIPPED: the canary needs loopback address %s, missing on this machine: %v", ip, err)
	}
	c := &canaryListener{Addr: ln.Addr().String()}
	c.URL = "http://" + c.Addr
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "canary", http.StatusTeapot)
	}))
	srv.Listener.Close()
	srv.Listener = countingListener{Listener: ln, n: &c.hits}
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return c
}

// loopbackName returns a name other than localhost that /etc/hosts maps
// to a loopback address (Debian maps the machine's own name there), or "".
func loopbackName() string {
	f, err := os.Open("/etc/hosts")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.SplitN(sc.Text(), "#", 2)[0])
		if len(fields) < 2 {
			continue
		}
		ip, err := netip.ParseAddr(fields[0])
		if err != nil || !ip.Unmap().Is4() || !ip.IsLoopback() {
			continue
		}
		for _, name := range fields[1:] {
			if name != "localhost" && !strings.HasSuffix(name, ".localhost") {
				return name
			}
		}
	}
	return ""
}

// ownList is a user's list of remote servers by name.
func ownList(urls map[string]string) string {
	var b strings.Builder
	b.WriteString(`{"mcpServers": {`)
	first := true
	for name, u := range urls {
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(&b, "%q: {\"url\": %q}", name, u)
	}
	b.WriteString("}}")
	return b.String()
}

// refused checks that server is quarantined for user with a reason that
// holds want, and that none of its tools was published.
func (f *fixture) refused(user, server, want string) {
	f.t.Helper()
	st := f.statusOf(user, server)
	if st.State != "quarantined" || !strings.Contains(st.Reason, want) {
		f.t.Errorf("%s: status %q, reason %q; want quarantined with %q", server, st.State, st.Reason, want)
	}
	if hasPrefix(f.names(user), server+"/") {
		f.t.Errorf("%s: tools published: %q", server, f.names(user))
	}
}

// ssrfOptions connects quickly: a refused dial fails at once, a name that
// does not resolve within the connect timeout fails then.
var ssrfOptions = &extmcp.Options{Catalog: &catalog.Options{ConnectTimeout: 10 * time.Second}}

// TestUserServerSSRF adds, as a user's own servers, URLs that point at
// this machine, the private network and the cloud's metadata service in
// every spelling, and checks that each is quarantined with a reason that
// says why, naming the server, and that no connection reached the canary
// listening where the loopback ones point.
func TestUserServerSSRF(t *testing.T) {
	t.Parallel()
	for _, carrier := range []string{"inprocess", "grpc"} {
		t.Run(carrier, func(t *testing.T) {
			t.Parallel()
			canary := newCanary(t, "127.0.0.1")
			_, port, _ := net.SplitHostPort(canary.Addr)
			attacks := map[string]struct{ url, want string }{
				"metadata": {"http://169.254.169.254/latest/meta-data/",
					"u_metadata: 169.254.169.254 is a link-local address (cloud metadata services live here): refused; the operator can allow it with userServerAllowCIDRs"},
				"metadatatls": {"https://169.254.169.254/mcp", "169.254.169.254 is a link-local address"},
				"ten":         {"https://10.0.0.1/mcp", "u_ten: 10.0.0.1 is a private address: refused"},
				"rfc1918":     {"https://192.168.1.1:8443/mcp", "192.168.1.1 is a private address"},
				"cgnat":       {"https://100.64.0.1/mcp", "100.64.0.1 is a shared address space (carrier-grade NAT)"},
				"multicast":   {"https://224.0.0.1/mcp", "224.0.0.1 is a multicast address"},
				"ulaipv6":     {"https://[fd00::1]/mcp", "fd00::1 is a private address"},
				"linklocal6":  {"https://[fe80::1]/mcp", "fe80::1 is a link-local address"},
				"loopback":    {canary.URL + "/mcp", "u_loopback: 127.0.0.1 is a loopback address: refused"},
				"localhost":   {"http://localhost:" + port + "/mcp", "is a loopback address: refused"},
				"mapped":      {"http://[::ffff:127.0.0.1]:" + port + "/mcp", "127.0.0.1 is a loopback address"},
				"unspecified": {"http://0.0.0.0:" + port + "/mcp", "0.0.0.0 is a unspecified address"},
				// Browsers read these as 127.0.0.1; Go's resolver as names.
				"hex":      {"https://0x7f000001:" + port + "/mcp", "u_hex: 0x7f000001 is an IPv4 address in a numeric notation"},
				"decimal":  {"https://2130706433:" + port + "/mcp", "u_decimal: 2130706433 is an IPv4 address in a numeric notation"},
				"octal":    {"https://017700000001:" + port + "/mcp", "u_octal: 017700000001 is an IPv4 address in a numeric notation"},
				"short":    {"https://127.1:" + port + "/mcp", "u_short: 127.1 is an IPv4 address in a numeric notation"},
				"hexparts": {"http://0x7f.0.0.1:" + port + "/mcp", "u_hexparts: 0x7f.0.0.1 is an IPv4 address in a numeric notation"},
				// Plain http beyond loopback would carry the user's token in
				// clear text.
				"plain": {"http://mcp.example.com/mcp", "u_plain: plain http to mcp.example.com would send credentials in clear text (use https): refused (the operator can allow http with userServerAllowHTTP)"},
			}
			if name := loopbackName(); name != "" {
				attacks["named"] = struct{ url, want string }{"https://" + name + ":" + port + "/mcp", "is a loopback address: refused"}
			} else {
				t.Log("no name but localhost maps to loopback in /etc/hosts: the named case is left out")
			}
			urls := map[string]string{}
			for name, a := range attacks {
				urls[name] = a.url
			}
			f := newFixtureWith(t, carrier, `{"userServers": "url"}`, ssrfOptions, nil)
			f.setOwn("alice", ownList(urls))
			f.activate("alice")
			for name, a := range attacks {
				f.refused("alice", "u_"+name, a.want)
			}
			if n := canary.hits.Load(); n != 0 {
				t.Errorf("%d connections reached the canary on %s", n, canary.Addr)
			}
		})
	}
}

// TestUserServerSSRFRedirect follows redirects from a server the operator
// allows (127.0.0.1) to one it does not (127.0.0.2): at connect time, and
// in the middle of a session, on a tool call. The second hop is refused
// when dialed.
func TestUserServerSSRFRedirect(t *testing.T) {
	t.Parallel()
	canary := newCanary(t, "127.0.0.2")
	var redirected atomic.Int64
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirected.Add(1)
		http.Redirect(w, r, canary.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(allowed.Close)
	// A server that behaves until a tool is called, then redirects.
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return bigServer() }, nil)
	var midcall atomic.Int64
	later := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"tools/call"`) {
			midcall.Add(1)
			http.Redirect(w, r, canary.URL+"/mcp", http.StatusTemporaryRedirect)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		later.CloseClientConnections()
		later.Close()
	})
	f := newFixtureWith(t, "grpc", `{"userServers": "url", "userServerAllowCIDRs": ["127.0.0.1/32"]}`, ssrfOptions, nil)
	f.setOwn("alice", ownList(map[string]string{"hop": allowed.URL + "/mcp", "later": later.URL}))
	f.activate("alice")
	f.refused("alice", "u_hop", "u_hop: 127.0.0.2 is a loopback address: refused; the operator can allow it with userServerAllowCIDRs")
	if redirected.Load() == 0 {
		t.Error("the allowed server was never asked: the redirect was not exercised")
	}
	f.wantErrorResult("alice", "u_later/big", bigArgs(10), "u_later: 127.0.0.2 is a loopback address: refused; the operator can allow it with userServerAllowCIDRs")
	if midcall.Load() == 0 {
		t.Error("the call was never redirected")
	}
	if n := canary.hits.Load(); n != 0 {
		t.Errorf("%d connections reached the canary behind the redirect", n)
	}
}

// TestSelfLoopRefused gives the extension the host's own listen address
// (and public URL) and points a user's server and an operator's server at
// it: both are refused, even where the operator allows loopback, while an
// operator's loopback server elsewhere and an allowed user server work.
func TestSelfLoopRefused(t *testing.T) {
	t.Parallel()
	own := newCanary(t, "127.0.0.1") // plays the host's own listener
	_, port, _ := net.SplitHostPort(own.Addr)
	rec := newRecorder(t, false) // an operator's server on loopback
	for name, tc := range map[string]struct {
		listen, public string
		want           string
	}{
		"listen address": {listen: own.Addr, want: own.Addr + " is the host's own address: refused (a server there would be agenthost calling itself in a loop)"},
		"unspecified listen address": {listen: "0.0.0.0:" + port,
			want: own.Addr + " is the host's own address: refused (a server there would be agenthost calling itself in a loop)"},
		"public URL": {listen: "127.0.0.1:1", public: "https://localhost:" + port, want: "the host's own"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := fmt.Sprintf(`{"userServers": "url", "userServerAllowCIDRs": ["127.0.0.1/32", "::1/128"],
				"mcpServers": {"opself": {"url": %q}, "ops": {"url": %q}}}`, own.URL+"/mcp", rec.URL)
			f := newFixtureWith(t, "grpc", cfg, ssrfOptions, func(r *ext.ConfigureRequest) {
				r.ListenAddr, r.PublicURL = tc.listen, tc.public
			})
			self := own.URL + "/mcp"
			if tc.public != "" {
				self = tc.public + "/mcp"
			}
			f.setOwn("alice", ownList(map[string]string{"self": self, "selfname": "http://localhost:" + port + "/mcp", "mine": rec.URL}))
			f.setSecret("alice", extmcp.TokenSecret("u_mine"), "CANARY-alice-mine")
			f.activate("alice")
			f.refused("alice", "u_self", "u_self: ")
			f.refused("alice", "u_self", tc.want)
			f.refused("alice", "u_selfname", "the host's own")
			f.refused("alice", "opself", "opself: ")
			f.refused("alice", "opself", "the host's own")
			if got := f.mustCall("alice", "u_mine/whoami", `{}`).Text(); got != "Bearer CANARY-alice-mine" {
				t.Errorf("an allowed loopback user server answered %q", got)
			}
			if st := f.statusOf("alice", "ops"); st.State != "connected" {
				t.Errorf("an operator's loopback server: %+v", st)
			}
			f.mustCall("alice", "ops/whoami", `{}`)
			if n := own.hits.Load(); n != 0 {
				t.Errorf("%d connections reached the host's own address", n)
			}
		})
	}
}

// TestUserServerHTTPAllowed lets the operator allow plain http for the
// users' own servers: the URL form is no longer refused (the address
// still is).
func TestUserServerHTTPAllowed(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, "inprocess", `{"userServers": "url", "userServerAllowHTTP": true}`, ssrfOptions, nil)
	f.setOwn("alice", ownList(map[string]string{"plain": "http://10.1.2.3/mcp"}))
	f.activate("alice")
	f.refused("alice", "u_plain", "u_plain: 10.1.2.3 is a private address: refused")
}

// TestUserServerHTTPInSettings checks that the "Your MCP servers" form
// refuses a plain http URL beyond loopback next to its field, unless the
// operator allows http; https and http to localhost pass.
func TestUserServerHTTPInSettings(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		config string
		plain  bool // a plain http URL passes
	}{
		"default":             {`{"userServers": "url"}`, false},
		"userServerAllowHTTP": {`{"userServers": "url", "userServerAllowHTTP": true}`, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, "grpc", tc.config, nil)
			d, err := f.e.Describe(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			var (
				form  settings.Form
				found bool
			)
			for _, s := range d.Settings {
				if s.ID == extmcp.SectionUserServers {
					found = true
					if form, err = settings.ParseForm(s.Form); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !found {
				t.Fatal("no Your MCP servers section")
			}
			check := func(list string) error {
				v, _ := json.Marshal(map[string]string{extmcp.UserServersField: list})
				_, err := settings.ValidateValues(form, v)
				return err
			}
			for _, ok := range []string{`{"mcpServers": {"a": {"url": "https://mcp.example.com/mcp"}}}`,
				`{"servers": {"a": {"url": "http://localhost:8080/mcp"}, "b": {"url": "http://127.0.0.1/mcp"}}}`} {
				if err := check(ok); err != nil {
					t.Errorf("%s refused: %v", ok, err)
				}
			}
			err = check(`{"mcpServers": {"a": {"url": "http://mcp.example.com/mcp"}}}`)
			if tc.plain != (err == nil) {
				t.Fatalf("a plain http URL: %v; want accepted=%v", err, tc.plain)
			}
			t.Logf("refused: %v", err)
			if err != nil && !strings.Contains(err.Error(), "mcpServers.a.url") {
				t.Errorf("the error does not name the field: %v", err)
			}
		})
	}
}
