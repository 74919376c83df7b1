// Package netguard keeps outbound connections that a user (or a remote
// party) can steer away from addresses they must not reach: server-side
// request forgery (SSRF). An extension that fetches user-supplied URLs —
// ext-mcp connecting to a user's own MCP server, an OAuth client following
// a server's metadata, the host fetching a client ID metadata document —
// dials through a [Policy].
//
// The check runs at dial time, on the address actually dialed ([Policy.Control]
// is a [net.Dialer] Control hook), not on the URL: a name that resolves to
// a public address when checked and to 127.0.0.1 when dialed (DNS
// rebinding) cannot pass, every redirect hop is checked because each is a
// dial, and spellings such as 0x7f.1, 017700000001, [::ffff:127.0.0.1] or
// a name in /etc/hosts change nothing, since the resolver has already made
// them an IP address.
//
// Refused by default (see [Blocked]): loopback, unspecified, private
// (RFC 1918, fc00::/7), link-local (169.254.0.0/16, where cloud metadata
// services live, and fe80::/10), shared address space (CGNAT,
// 100.64.0.0/10), multicast, broadcast and the other reserved IPv4 ranges,
// and IPv6 forms that embed an IPv4 address (IPv4-mapped, NAT64, 6to4,
// Teredo) when the embedded address is refused. [Policy.Allow] lets an
// operator open chosen prefixes; [Policy.Deny] closes chosen address:port
// pairs even when they are otherwise allowed (a host's own listen address,
// so that a URL pointing back at the host cannot loop; 0.0.0.0 and ::,
// which reach loopback, are denied where a loopback address is).
//
// A Policy is immutable once in use and safe for concurrent use.
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrBlocked is wrapped by every refusal of an address.
var ErrBlocked = errors.New("address not allowed")

// Policy decides which addresses may be dialed. The zero value refuses
// every range [Blocked] names and allows the rest.
type Policy struct {
	// Allow lists prefixes that may be dialed although [Blocked] refuses
	// them (for instance 10.20.0.0/16 for an intranet the operator trusts,
	// or 127.0.0.1/32 in tests).
	Allow []netip.Prefix
	// Deny lists address:port pairs that are refused even when allowed:
	// the host's own listen addresses. An entry whose address is
	// unspecified (0.0.0.0 or ::) refuses that port on loopback and on
	// every address of this machine's interfaces.
	Deny []netip.AddrPort
}

// Blocked reports whether ip lies in a range refused by default, and
// which one.
func Blocked(ip netip.Addr) (reason string, blocked bool) {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		return Blocked(ip.Unmap())
	}
	if v4, ok := embeddedIPv4(ip); ok {
		if r, b := Blocked(v4); b {
			return r + " (embedded in " + ip.String() + ")", true
		}
	}
	switch {
	case !ip.IsValid():
		return "invalid address", true
	case ip.IsUnspecified():
		return "unspecified address", true
	case ip.IsLoopback():
		return "loopback address", true
	case ip.IsPrivate():
		return "private address", true
	case ip.IsLinkLocalUnicast():
		return "link-local address (cloud metadata services live here)", true
	case ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast(), ip.IsMulticast():
		return "multicast address", true
	}
	for _, r := range reserved {
		if r.p.Contains(ip) {
			return r.reason, true
		}
	}
	return "", false
}

var reserved = []struct {
	p      netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network" address`},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved address"}, // includes 255.255.255.255
	{netip.MustParsePrefix("fec0::/10"), "site-local address"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation address"},
	{netip.MustParsePrefix("100::/64"), "discard-only address"},
}

// embeddedIPv4 returns the IPv4 address that NAT64 (64:ff9b::/96 and
// 64:ff9b:1::/48), 6to4 (2002::/16) and Teredo (2001::/32) addresses
// carry.
func embeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip), nat64Local.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case teredo.Contains(ip):
		// The client's address is stored inverted in the last 32 bits.
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
)

// Check returns nil when ap may be dialed under p, else an error wrapping
// [ErrBlocked] that says why.
func (p *Policy) Check(ap netip.AddrPort) error {
	ip := ap.Addr().WithZone("").Unmap()
	if p != nil {
		for _, d := range p.Deny {
			if d.Port() == ap.Port() && p.denies(d.Addr(), ip) {
				return fmt.Errorf("%s is the host's own address: %w", ap, ErrBlocked)
			}
		}
		for _, a := range p.Allow {
			if a.Contains(ip) {
				return nil
			}
		}
	}
	if reason, blocked := Blocked(ip); blocked {
		return fmt.Errorf("%s is a %s: %w", ip, reason, ErrBlocked)
	}
	return nil
}

// denies reports whether a Deny entry's address d covers ip. A dial of
// an unspecified address (0.0.0.0, ::) reaches loopback, so it is denied
// where a loopback address is.
func (p *Policy) denies(d, ip netip.Addr) bool {
	d = d.WithZone("").Unmap()
	if !d.IsUnspecified() {
		return d == ip || (ip.IsUnspecified() && d.IsLoopback())
	}
	local, err := IsLocal(ip)
	return local || err != nil // cannot tell: refuse
}

// IsLocal reports whether ip is an address of this machine: loopback,
// unspecified, or an address of one of its interfaces. It fails when the
// interfaces cannot be listed.
func IsLocal(ip netip.Addr) (bool, error) {
	ip = ip.WithZone("").Unmap()
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false, fmt.Errorf("listing this machine's addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if la, ok := netip.AddrFromSlice(n.IP); ok && la.Unmap() == ip {
				return true, nil
			}
		}
	}
	return false, nil
}

// Control is a [net.Dialer] Control hook that refuses, at dial time, the
// addresses p does not allow. The address it sees has been resolved.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dialing %s %q: not an IP address and port: %w", network, address, ErrBlocked)
	}
	return p.Check(ap)
}

// Dialer returns a dialer with p's Control hook and the given connect
// timeout (0 means none beyond the context's).
func (p *Policy) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: p.Control}
}

// Transport returns an HTTP transport whose every connection is dialed
// through p, with sensible limits for an HTTP client that calls a few
// servers often. It ignores proxy settings from the environment: a proxy
// would dial the target on our behalf, unchecked.
func (p *Policy) Transport() *http.Transport {
	return &http.Transport{
		DialContext:           p.Dialer(10 * time.Second).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Client returns an HTTP client on [Policy.Transport] that follows at most
// five redirects, each of them dialed through p, and only to http or
// https URLs.
func (p *Policy) Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: p.Transport(),
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return fmt.Errorf("stopped after %d redirects", len(via))
			}
			if s := req.URL.Scheme; s != "http" && s != "https" {
				return fmt.Errorf("redirect to a %q URL: %w", s, ErrBlocked)
			}
			return nil
		},
	}
}

// CheckURL parses a URL that will be fetched and checks its form: http or
// https, a host, no user info (credentials in URLs end up in logs), no
// fragment. Plain http is accepted only when allowHTTP is set or the host
// is a loopback name or address (tokens would otherwise cross the network
// in clear text). It does not check the address: the dial does.
func CheckURL(raw string, allowHTTP bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("the URL does not parse: %w", ErrBlocked)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("the URL's scheme %q is not http or https: %w", u.Scheme, ErrBlocked)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("the URL has no host: %w", ErrBlocked)
	case u.User != nil:
		return nil, fmt.Errorf("the URL carries user info: %w", ErrBlocked)
	case u.Fragment != "":
		return nil, fmt.Errorf("the URL has a fragment: %w", ErrBlocked)
	case u.Scheme == "http" && !allowHTTP && !IsLoopbackHost(u.Hostname()):
		return nil, fmt.Errorf("plain http to %s would send credentials in clear text (use https): %w", u.Hostname(), ErrBlocked)
	}
	return u, nil
}

// IsLoopbackHost reports whether host (a name or an IP address, without
// port) is "localhost", a name under .localhost, or a loopback address.
func IsLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// ParsePrefixes parses CIDR prefixes (a bare address is a single-address
// prefix), naming the first bad entry.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "/") {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("entry %d (%q) is not a CIDR prefix or an IP address", i, s)
			}
			out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("entry %d (%q) is not a CIDR prefix such as 10.0.0.0/8", i, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
