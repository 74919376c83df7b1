package extmcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/netguard"
)

// Server-side request forgery: which addresses remote servers may reach
// (SECURITY.md C11). A user's own server (u_*) is a URL anyone with an
// account wrote, so it may not reach this machine, the private network or
// the cloud's metadata service: its connections are dialed through a
// [netguard.Policy] that refuses loopback, private, link-local, CGNAT,
// multicast and reserved addresses unless the operator opens prefixes
// (userServerAllowCIDRs). The check runs on the address each connection
// dials — a name, a redirect or a rebinding DNS answer cannot pass — and
// plain http beyond loopback is refused unless userServerAllowHTTP. The
// operator's servers may reach any address (operators point at intranet
// and loopback servers on purpose). Neither may reach the host itself:
// its listen address and its public URL, when that resolves to this
// machine, are denied to both, so that a server cannot be the host's own
// /mcp calling back into ext-mcp in a loop.
//
// OAuth requests (discovery, registration, token, refresh) go where a
// server's metadata points, which the server chooses: a remote operator's
// server could point its token endpoint at a loopback port and be sent
// the code, the PKCE verifier and the operator's client secret. So every
// server's OAuth requests dial through the users' policy (loopback,
// private, link-local... refused unless userServerAllowCIDRs opens them),
// the operator's servers included, with one exception: an operator's
// server's own host (the host name or address of its url, any port) may
// be reached as its connections reach it, since the operator chose that
// host (an MCP server on this machine with its authorization server on
// another port of it). OAuth requests use no proxy: a proxy would dial
// for us, unchecked.

// guard is what one config lets remote connections reach. It is
// immutable once built and safe for concurrent use.
type guard struct {
	user, operator netguard.Policy
	userHTTP       bool     // userServerAllowHTTP
	self           []string // origins of the host's own URLs
	// The keep-alive pools of each kind of server: one transport each, so
	// that a connection dialed under one policy never serves the other.
	userTransport, operatorTransport *http.Transport

	oauthMu sync.Mutex
	// oauthTransports are the pools of the OAuth requests of the
	// operator's servers, by the server's host (see oauthTransport).
	oauthTransports map[string]*http.Transport
}

// everywhere lets the operator's servers reach any address.
var everywhere = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// newGuard builds the guard of cfg for a host that listens on
// req.ListenAddr and is reached at req.PublicURL.
func newGuard(ctx context.Context, cfg *Config, req *ext.ConfigureRequest, log *slog.Logger) *guard {
	allow, _ := netguard.ParsePrefixes(cfg.UserServerAllowCIDRs) // validated by ParseConfig
	deny, self := hostAddrs(ctx, req.ListenAddr, req.PublicURL, log)
	g := &guard{
		user:     netguard.Policy{Allow: allow, Deny: deny},
		operator: netguard.Policy{Allow: everywhere, Deny: deny},
		userHTTP: cfg.UserServerAllowHTTP,
		self:     self,
	}
	g.operatorTransport = newHTTPTransport(&g.operator)
	// netguard's transport ignores proxies (a proxy would dial for us,
	// unchecked). A call answered with JSON may take minutes before its
	// first byte: the call's own timeout bounds it, not the transport.
	g.userTransport = g.user.Transport()
	g.userTransport.ResponseHeaderTimeout = 0
	return g
}

// closeIdle drops the idle keep-alive connections of both pools.
func (g *guard) closeIdle() {
	g.userTransport.CloseIdleConnections()
	g.operatorTransport.CloseIdleConnections()
	g.oauthMu.Lock()
	defer g.oauthMu.Unlock()
	for _, t := range g.oauthTransports {
		t.CloseIdleConnections()
	}
}

// oauthTransport is the pool of the OAuth requests of a user's own server
// (own: its connections' pool) or of the operator's server at serverURL:
// a dial to that server's own host goes through the operator's policy,
// any other through the users' policy.
func (g *guard) oauthTransport(own bool, serverURL string) *http.Transport {
	if own {
		return g.userTransport
	}
	host := ""
	if u, err := url.Parse(serverURL); err == nil {
		host = hostKey(u.Hostname())
	}
	g.oauthMu.Lock()
	defer g.oauthMu.Unlock()
	if t := g.oauthTransports[host]; t != nil {
		return t
	}
	t := g.user.Transport() // no proxy
	strict, open := g.user.Dialer(10*time.Second), g.operator.Dialer(10*time.Second)
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h, _, err := net.SplitHostPort(addr); err == nil && host != "" && hostKey(h) == host {
			return open.DialContext(ctx, network, addr)
		}
		c, err := strict.DialContext(ctx, network, addr)
		if errors.Is(err, netguard.ErrBlocked) {
			err = fmt.Errorf("%w; userServerAllowCIDRs opens it", err)
		}
		return c, err
	}
	t.MaxIdleConnsPerHost = 4
	if g.oauthTransports == nil {
		g.oauthTransports = map[string]*http.Transport{}
	}
	g.oauthTransports[host] = t
	return t
}

// hostKey is a URL's host in one spelling: lower case, without a final
// dot or brackets, an IPv4-mapped address unmapped.
func hostKey(h string) string {
	h = strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return h
}

// transport is the pool for a user's own server (own) or an operator's.
func (g *guard) transport(own bool) *http.Transport {
	if own {
		return g.userTransport
	}
	return g.operatorTransport
}

// hostAddrs returns the addresses that are the host itself: its listen
// address (an unspecified one, such as 0.0.0.0:7777, stands for its port
// on every address of this machine) and its public URL's host and port
// where they resolve to this machine; and the origins of both URLs. A
// listen address with port 0 (a port not yet chosen) is left out.
func hostAddrs(ctx context.Context, listen, public string, log *slog.Logger) ([]netip.AddrPort, []string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var (
		deny []netip.AddrPort
		self []string
	)
	if host, port, err := net.SplitHostPort(listen); err == nil {
		p, _ := strconv.ParseUint(port, 10, 16)
		if p != 0 {
			ips := []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
			if host != "" {
				ips = resolve(ctx, host, log)
			}
			for _, ip := range ips {
				deny = append(deny, netip.AddrPortFrom(ip, uint16(p)))
			}
			self = append(self, origin("http", host, port), origin("https", host, port))
		}
	}
	if u, err := url.Parse(public); err == nil && u.Hostname() != "" {
		port := u.Port()
		if port == "" {
			port = defaultPort(u.Scheme)
		}
		p, _ := strconv.ParseUint(port, 10, 16)
		for _, ip := range resolve(ctx, u.Hostname(), log) {
			if local, _ := netguard.IsLocal(ip); local {
				deny = append(deny, netip.AddrPortFrom(ip, uint16(p)))
			}
		}
		self = append(self, origin(u.Scheme, u.Hostname(), port))
	}
	return deny, self
}

// resolve returns host's addresses (host may be an address itself).
func resolve(ctx context.Context, host string, log *slog.Logger) []netip.Addr {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{ip.Unmap()}
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		log.Warn("extmcp: the host's own name does not resolve; servers there are refused by URL only", "host", host, "error", err)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips
}

// origin is scheme://host:port in one spelling, the port always written.
func origin(scheme, host, port string) string {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		host = ip.Unmap().String()
	}
	return strings.ToLower(scheme + "://" + net.JoinHostPort(strings.TrimSuffix(host, "."), port))
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// check refuses, before anything is dialed, a remote server's URL that
// names a refused address outright (the host's own, or for a user's own
// server (own) any the policy refuses), that points at the host's own URL,
// or that, for a user's own server, uses plain http beyond loopback or a
// host that browsers read as an IPv4 address in another notation. Names
// are checked when dialed ([guard.explain] words those refusals).
func (g *guard) check(server, raw string, own bool) error {
	pol := &g.operator
	if own {
		pol = &g.user
	}
	if u, err := url.Parse(raw); err == nil && u.Hostname() != "" {
		port := u.Port()
		if port == "" {
			port = defaultPort(u.Scheme)
		}
		p, _ := strconv.ParseUint(port, 10, 16)
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
			if err := pol.Check(netip.AddrPortFrom(ip, uint16(p))); err != nil {
				return refusal(server, own, err)
			}
		} else if own && numericHost(u.Hostname()) {
			return fmt.Errorf("%s: %s is an IPv4 address in a numeric notation (hex, octal, decimal or shortened) that browsers read as an address: refused; write it as four decimal numbers",
				server, clip(u.Hostname(), 64))
		}
		o := origin(u.Scheme, u.Hostname(), port)
		for _, s := range g.self {
			if o == s {
				return fmt.Errorf("%s: %s is the host's own URL: refused (%s)", server, o, loopNote)
			}
		}
	}
	if !own {
		return nil // the operator's URL was checked when the config loaded
	}
	if _, err := netguard.CheckURL(raw, g.userHTTP); err != nil {
		reason, hint := guardReason(err), ""
		if strings.HasPrefix(reason, "plain http") {
			hint = " (the operator can allow http with userServerAllowHTTP)"
		}
		return fmt.Errorf("%s: %s: refused%s", server, reason, hint)
	}
	return nil
}

// numericHost reports whether host ends in a number, which the WHATWG URL
// parser (browsers, and servers that follow it) reads as an IPv4 address:
// 0x7f000001, 2130706433, 017700000001, 127.1.
func numericHost(host string) bool {
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := labels[len(labels)-1]
	if strings.HasPrefix(last, "0x") || strings.HasPrefix(last, "0X") {
		last = last[2:]
		return strings.Trim(last, "0123456789abcdefABCDEF") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// loopNote says why the host's own address is refused.
const loopNote = "a server there would be agenthost calling itself in a loop"

// explain words a connection refused by the policy when it was dialed
// (when connecting, or later: a redirect, a name that now resolves
// elsewhere); it returns nil for any other error.
func explain(server string, own bool, err error) error {
	if !errors.Is(err, netguard.ErrBlocked) {
		return nil
	}
	return refusal(server, own, err)
}

// refusal words a policy's refusal of an address for server.
func refusal(server string, own bool, err error) error {
	reason := guardReason(err)
	switch {
	case strings.Contains(reason, "the host's own address"):
		return fmt.Errorf("%s: %s: refused (%s)", server, reason, loopNote)
	case own:
		return fmt.Errorf("%s: %s: refused; the operator can allow it with userServerAllowCIDRs", server, reason)
	}
	return fmt.Errorf("%s: %s: refused", server, reason)
}

// guardReason is netguard's own words for a refusal, found in err's chain,
// without the sentinel's text.
func guardReason(err error) string {
	suffix := ": " + netguard.ErrBlocked.Error()
	var walk func(error) string
	walk = func(e error) string {
		for e != nil {
			if errors.Unwrap(e) == netguard.ErrBlocked {
				return strings.TrimSuffix(e.Error(), suffix)
			}
			if m, ok := e.(interface{ Unwrap() []error }); ok {
				for _, c := range m.Unwrap() {
					if r := walk(c); r != "" {
						return r
					}
				}
				return ""
			}
			e = errors.Unwrap(e)
		}
		return ""
	}
	if r := walk(err); r != "" {
		return r
	}
	return strings.TrimSuffix(err.Error(), suffix)
}
