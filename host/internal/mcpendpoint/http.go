package mcpendpoint

import (
	"net/url"
	"strings"

	"github.com/agenthost/agenthost/ext/netguard"
)

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
	return netguard.IsLoopbackHost(u.Hostname())
}
