package guard

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/agenthost/agenthost/ext/netguard"
)

// HostAllowed is the DNS-rebinding check: a request that reached a
// loopback address must name a loopback host, or one of allowed (host
// names without port, such as the host of the operator's publicURL; see
// [HostOf]). A request that reached another address is not checked here:
// who may connect to it is the listener's and TLS's business.
func HostAllowed(r *http.Request, allowed []string) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil || !netguard.IsLoopbackHost(hostOnly(local.String())) {
		return true
	}
	h := hostOnly(r.Host)
	if netguard.IsLoopbackHost(h) {
		return true
	}
	h = normHost(h)
	for _, a := range allowed {
		if h != "" && normHost(a) == h {
			return true
		}
	}
	return false
}

// HostOf returns the host name (without port) of a URL such as the
// operator's publicURL, for [HostAllowed]; "" when there is none.
func HostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return normHost(u.Hostname())
}

// PathOf returns the path of a URL such as the operator's publicURL,
// without its trailing slash ("/agenthost" for
// https://example.com/agenthost/); "" when it has none.
func PathOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return strings.TrimRight(u.Path, "/")
}

func normHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}
