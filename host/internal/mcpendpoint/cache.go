package mcpendpoint

import (
	"crypto/sha256"
	"sync"
	"time"
)

// maxCachedTokens bounds the verification cache; when it is full it
// starts afresh.
const maxCachedTokens = 10_000

// verifyCache remembers successful verifications for a short time, keyed
// by the SHA-256 of the token (the token itself is not kept). Failures are
// never cached, so guesses always reach the verifier and the limiter.
type verifyCache struct {
	ttl time.Duration
	now func() time.Time

	mu  sync.Mutex
	m   map[[sha256.Size]byte]cachedPrincipal
	gen uint64 // bumped by every revocation
}

type cachedPrincipal struct {
	p       Principal
	expires time.Time
}

func newVerifyCache(ttl time.Duration) *verifyCache {
	return &verifyCache{ttl: ttl, now: time.Now, m: map[[sha256.Size]byte]cachedPrincipal{}}
}

// get returns the cached principal of the token with this key, and the
// generation to pass to put after a verification.
func (c *verifyCache) get(key [sha256.Size]byte) (Principal, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if ok && c.now().Before(e.expires) {
		return e.p, true, c.gen
	}
	if ok {
		delete(c.m, key)
	}
	return Principal{}, false, c.gen
}

// put caches a verification, unless a revocation happened since gen (the
// verification may predate it).
func (c *verifyCache) put(key [sha256.Size]byte, p Principal, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if len(c.m) >= maxCachedTokens {
		clear(c.m)
	}
	exp := c.now().Add(c.ttl)
	if !p.Expires.IsZero() && p.Expires.Before(exp) {
		exp = p.Expires // never past the token's own end
	}
	c.m[key] = cachedPrincipal{p: p, expires: exp}
}

// revoke forgets every token with this ID.
func (c *verifyCache) revoke(tokenID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k, e := range c.m {
		if e.p.TokenID == tokenID {
			delete(c.m, k)
		}
	}
}
