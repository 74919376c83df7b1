package serve

import (
	"crypto/tls"
	"net/netip"
	"time"
)

// SetOAuthForTest lets o's OAuth server fetch client ID metadata
// documents from the allowed prefixes (a test server on 127.0.0.1) with
// the TLS trust tlsConf, and issue access tokens that live accessTTL.
func SetOAuthForTest(o *Options, allow []netip.Prefix, tlsConf *tls.Config, accessTTL time.Duration) {
	o.oauthAllow, o.oauthTLS, o.oauthAccessTTL = allow, tlsConf, accessTTL
}
