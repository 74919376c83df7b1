package serve

import (
	"net/http"
	"time"
)

// SetOAuthForTest makes o's OAuth server fetch client ID metadata
// documents with docs (which trusts a test TLS server) and issue access
// tokens that live accessTTL.
func SetOAuthForTest(o *Options, docs *http.Client, accessTTL time.Duration) {
	o.oauthDocs, o.oauthAccessTTL = docs, accessTTL
}
