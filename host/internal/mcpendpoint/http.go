package mcpendpoint

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// isLoopbackHost reports whether host (a name or IP, without port) is a
// loopback host.
func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// hostOnly strips the port of a host[:port] value.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// hostAllowed is the DNS-rebinding check: a request that reached a
// loopback address must name a loopback host. A page on evil.example whose
// name was rebound to 127.0.0.1 sends "Host: evil.example". go-sdk makes
// the same check; making it first answers 403 before the token is looked
// at.
func hostAllowed(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil || !isLoopbackHost(hostOnly(local.String())) {
		return true
	}
	return isLoopbackHost(hostOnly(r.Host))
}

// normalizeOrigin returns origin as lowercase scheme://host[:port], or
// false when it is not an http(s) origin.
func normalizeOrigin(origin string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(origin))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), true
}

// originAllowed reports whether a request with this Origin header may be
// served: none (non-browser clients), a loopback origin (a page served on
// this machine), or one the operator allowed. Everything else, including
// "null", is refused: it is a page of another site, which a DNS-rebinding
// attack would use.
func (e *Endpoint) originAllowed(origin string) bool {
	if origin == "" || e.anyOrig {
		return true
	}
	n, ok := normalizeOrigin(origin)
	if !ok {
		return false
	}
	if e.origins[n] {
		return true
	}
	u, _ := url.Parse(n)
	return isLoopbackHost(u.Hostname())
}

// addrKey is the default [Options.AddrKey]: the IP of a host:port, the
// /64 prefix of an IPv6 address.
func addrKey(remoteAddr string) string {
	ip, err := netip.ParseAddr(hostOnly(remoteAddr))
	if err != nil {
		return remoteAddr
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.Prefix(64)
	if err != nil {
		return ip.String()
	}
	return p.String()
}
