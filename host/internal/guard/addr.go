package guard

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/agenthost/agenthost/ext/netguard"
)

// LoopbackKey is the [AddrKey] of every loopback address.
const LoopbackKey = "loopback"

// AddrKey turns a client address ("host:port" or a bare IP, as
// [TrustedProxies.ClientAddr] returns it) into the key that failed
// attempts are counted by: [LoopbackKey] for every loopback address
// (127.0.0.0/8, ::1 and their IPv4-mapped forms), the IP for IPv4 (and
// IPv4-mapped IPv6), the /64 prefix for IPv6. Anything unparsable is
// returned as it is.
func AddrKey(addr string) string {
	ip, err := netip.ParseAddr(hostOnly(addr))
	if err != nil {
		return addr
	}
	ip = ip.Unmap().WithZone("")
	switch {
	case ip.IsLoopback():
		return LoopbackKey
	case ip.Is4():
		return ip.String()
	}
	p, err := ip.Prefix(64)
	if err != nil {
		return ip.String()
	}
	return p.String()
}

// TrustedProxies is the set of reverse proxies whose X-Forwarded-For
// header is believed. A nil *TrustedProxies trusts none: the client is
// always the immediate peer.
type TrustedProxies struct {
	prefixes []netip.Prefix
}

// NewTrustedProxies parses CIDRs ("10.0.0.0/8", "2001:db8::/32") or bare IP
// addresses (one proxy), as netguard.ParsePrefixes does. An empty list
// trusts no proxy. The error names the first entry that is neither.
func NewTrustedProxies(cidrs []string) (*TrustedProxies, error) {
	p, err := netguard.ParsePrefixes(cidrs)
	if err != nil {
		return nil, err
	}
	return &TrustedProxies{prefixes: p}, nil
}

// Trusts reports whether ip is a trusted proxy.
func (t *TrustedProxies) Trusts(ip netip.Addr) bool {
	if t == nil {
		return false
	}
	ip = ip.Unmap().WithZone("")
	for _, p := range t.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ClientAddr returns the IP address of r's client. It is r.RemoteAddr's
// IP, unless that peer is a trusted proxy: then X-Forwarded-For (every
// such header, in order, comma-separated entries) is read from the right,
// skipping trusted proxies, and the first address that is not one is the
// client. Entries left of it were written by the client and are not
// believed. When every entry is a trusted proxy the leftmost one is the
// client; a malformed entry stops the walk at the last address known good.
// An unparsable RemoteAddr (not TCP) is returned as it is.
func (t *TrustedProxies) ClientAddr(r *http.Request) string {
	peer, err := netip.ParseAddr(hostOnly(r.RemoteAddr))
	if err != nil {
		return r.RemoteAddr
	}
	client := peer.Unmap().WithZone("")
	if !t.Trusts(client) {
		return client.String()
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		entries := strings.Split(hops[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			ip, ok := parseHop(entries[j])
			if !ok {
				return client.String()
			}
			client = ip
			if !t.Trusts(ip) {
				return ip.String()
			}
		}
	}
	return client.String()
}

// Key returns the limiter key of r's client: [AddrKey] of
// [TrustedProxies.ClientAddr]. It is the function every surface counts
// failed attempts by.
func (t *TrustedProxies) Key(r *http.Request) string { return AddrKey(t.ClientAddr(r)) }

// parseHop parses one X-Forwarded-For entry: an IP, possibly with a port
// ("192.0.2.1:4711", "[2001:db8::1]:4711").
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	ip, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		ip = ap.Addr()
	}
	return ip.Unmap().WithZone(""), true
}

// hostOnly strips the port of a host[:port] value, and the brackets of an
// IPv6 literal.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}
