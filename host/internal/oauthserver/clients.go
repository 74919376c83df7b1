package oauthserver

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/agenthost/agenthost/ext/netguard"
)

// clientMetadata is what a registration request (RFC 7591) and a client
// ID metadata document carry that the server uses; other fields are
// ignored.
type clientMetadata struct {
	ClientID                string   `json:"client_id"`
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	ClientName              string   `json:"client_name"`
	ClientURI               string   `json:"client_uri"`
}

// metadataError is a refused client metadata field: RFC 7591's
// invalid_redirect_uri or invalid_client_metadata, with a description that
// names the field.
type metadataError struct {
	code, field, msg string
}

func (e *metadataError) Error() string { return e.field + ": " + e.msg }

func badMetadata(field, format string, args ...any) error {
	return &metadataError{code: "invalid_client_metadata", field: field, msg: fmt.Sprintf(format, args...)}
}

func badRedirect(format string, args ...any) error {
	return &metadataError{code: "invalid_redirect_uri", field: "redirect_uris", msg: fmt.Sprintf(format, args...)}
}

// Limits on client metadata.
const (
	maxRedirectURIs = 10
	maxURILen       = 2000
	maxNameLen      = 100
)

// redirectPolicy decides which redirect URIs a client may register.
type redirectPolicy struct {
	// hosts, when not empty, are the only hosts an https redirect URI may
	// name (lowercase). Loopback http URIs are always allowed.
	hosts []string
}

// isLoopback reports whether host (no port) is a loopback name or IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkRedirect checks one redirect URI: https (to an allowed host, when
// the operator lists them) or http to a loopback address (native apps,
// RFC 8252), absolute, without userinfo or fragment.
func (p redirectPolicy) checkRedirect(raw string) error {
	if len(raw) > maxURILen {
		return badRedirect("a redirect URI is longer than %d bytes", maxURILen)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return badRedirect("%q is not an absolute URL", clip(raw))
	}
	if u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") {
		return badRedirect("%q must not carry userinfo or a fragment", clip(raw))
	}
	host := strings.ToLower(u.Hostname())
	switch u.Scheme {
	case "https":
		if len(p.hosts) > 0 && !slices.Contains(p.hosts, host) && !isLoopback(host) {
			return badRedirect("%q: host %q is not one the operator allows (oauth.allowedRedirectHosts)", clip(raw), host)
		}
	case "http":
		if !isLoopback(host) {
			return badRedirect("%q: plain http is allowed only to a loopback address (127.0.0.1, [::1], localhost); use https", clip(raw))
		}
	default:
		return badRedirect("%q: the scheme must be https, or http to a loopback address", clip(raw))
	}
	return nil
}

// checkWebURL checks an optional informational URL (client_uri).
func checkWebURL(field, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || len(raw) > maxURILen || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return badMetadata(field, "%q is not an http(s) URL", clip(raw))
	}
	return nil
}

// checkName checks client_name: printable, at most maxNameLen characters.
func checkName(name string) error {
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > maxNameLen {
		return badMetadata("client_name", "must be valid UTF-8 of at most %d characters", maxNameLen)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return badMetadata("client_name", "must not contain control or invisible characters")
		}
	}
	return nil
}

// toClient validates metadata and makes a client of it. Every client is
// public: any token_endpoint_auth_method but "none" is answered with
// "none" for a registration (RFC 7591 lets the server choose), and
// refused for a metadata document (which cannot change its mind).
func (p redirectPolicy) toClient(m *clientMetadata, document bool) (*Client, error) {
	if len(m.RedirectURIs) == 0 {
		return nil, badRedirect("at least one redirect URI is required")
	}
	if len(m.RedirectURIs) > maxRedirectURIs {
		return nil, badRedirect("at most %d redirect URIs", maxRedirectURIs)
	}
	for _, r := range m.RedirectURIs {
		if err := p.checkRedirect(r); err != nil {
			return nil, err
		}
	}
	if document && m.TokenEndpointAuthMethod != "" && m.TokenEndpointAuthMethod != "none" {
		return nil, badMetadata("token_endpoint_auth_method", "%q is not supported: this server has public clients only (\"none\")", clip(m.TokenEndpointAuthMethod))
	}
	grants := m.GrantTypes
	if len(grants) == 0 {
		grants = []string{"authorization_code"}
	}
	for _, g := range grants {
		if g != "authorization_code" && g != "refresh_token" {
			return nil, badMetadata("grant_types", "%q is not supported (authorization_code, refresh_token)", clip(g))
		}
	}
	if !slices.Contains(grants, "authorization_code") {
		return nil, badMetadata("grant_types", "must include authorization_code")
	}
	for _, rt := range m.ResponseTypes {
		if rt != "code" {
			return nil, badMetadata("response_types", "%q is not supported (code)", clip(rt))
		}
	}
	if err := checkName(m.ClientName); err != nil {
		return nil, err
	}
	if err := checkWebURL("client_uri", m.ClientURI); err != nil {
		return nil, err
	}
	return &Client{
		Name: m.ClientName, URI: m.ClientURI, RedirectURIs: slices.Clone(m.RedirectURIs),
		GrantTypes: slices.Compact(slices.Sorted(slices.Values(grants))), Document: document,
	}, nil
}

// newClientID returns a fresh client ID for a registration.
func newClientID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "cl_" + hex.EncodeToString(b)
}

// isDocumentID reports whether a client ID is (meant as) a client ID
// metadata document URL.
func isDocumentID(id string) bool { return strings.HasPrefix(id, "https://") }

// checkDocumentURL checks a client ID metadata document URL: https, with a
// host and a path other than "/", without userinfo, fragment or dot
// segments (draft-ietf-oauth-client-id-metadata-document §3).
func checkDocumentURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || len(raw) > maxURILen || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("client_id %q is not an https URL", clip(raw))
	}
	if u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") {
		return fmt.Errorf("client_id %q must not carry userinfo or a fragment", clip(raw))
	}
	if u.Path == "" || u.Path == "/" {
		return fmt.Errorf("client_id %q needs a path: a metadata document URL names a document", clip(raw))
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("client_id %q must not contain . or .. segments", clip(raw))
		}
	}
	return nil
}

// Limits of metadata document fetches. Anyone may name any URL as a
// client_id, so fetches are bounded: at most fetchesInFlight at once
// (hostFetchesInFlight per host of the document URL), fetchesPerMinute a
// minute (hostFetchesPerMinute per host), each with a burst of as many; a
// URL that failed is not fetched again for failedDocTTL. What is over
// is refused (invalid_client) without a fetch.
const (
	// maxDocumentBytes follows the draft's advice (5 KB).
	maxDocumentBytes = 5 << 10
	documentTimeout  = 5 * time.Second
	maxCachedDocs    = 256
	// maxStaleDoc is how long a document fetched once keeps serving while
	// it cannot be fetched again.
	maxStaleDoc          = 24 * time.Hour
	fetchesInFlight      = 16
	hostFetchesInFlight  = 4
	fetchesPerMinute     = 60
	hostFetchesPerMinute = 20
	// addrFetchesPerMinute bounds the fetches one client address (the
	// requester's, [Options.AddrKey]) causes, checked before the overall
	// budget: one client cannot empty it for everyone.
	addrFetchesPerMinute = 20
	failedDocTTL         = 30 * time.Second
	maxFailedDocs        = 1024
	maxFetchHosts        = 1024
)

// errTooManyFetches refuses a fetch over the limits; errAddrFetches over
// those of the requester's address.
var (
	errTooManyFetches = errors.New("too many client metadata document fetches")
	errAddrFetches    = fmt.Errorf("%w from one client address", errTooManyFetches)
)

// addrCtxKey carries the requester's address key ([Options.AddrKey]) in
// a request's context, for the per-address limits of fetches.
type addrCtxKey struct{}

func requesterAddr(ctx context.Context) string {
	a, _ := ctx.Value(addrCtxKey{}).(string)
	return a
}

// addrRates is a rate limit per client address key, remembering at most
// maxAddrs of them (a key forgotten starts again with its burst, which
// the overall limits still bound). It is safe for concurrent use.
type addrRates struct {
	every time.Duration
	burst int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// maxAddrs bounds the addresses an addrRates remembers.
const maxAddrs = 4096

func newAddrRates(every time.Duration, burst int) *addrRates {
	return &addrRates{every: every, burst: burst, m: map[string]*rate.Limiter{}}
}

func (a *addrRates) limiter(key string) *rate.Limiter {
	l := a.m[key]
	if l == nil {
		if len(a.m) >= maxAddrs {
			clear(a.m)
		}
		l = rate.NewLimiter(rate.Every(a.every), a.burst)
		a.m[key] = l
	}
	return l
}

// has reports whether key may take one now, without taking it.
func (a *addrRates) has(key string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limiter(key).TokensAt(now) >= 1
}

// take takes one of key's, and reports whether there was one.
func (a *addrRates) take(key string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limiter(key).AllowN(now, 1)
}

// documents fetches and caches client ID metadata documents. It is safe
// for concurrent use; concurrent fetches of one URL share one request.
type documents struct {
	client *http.Client
	ttl    time.Duration
	policy redirectPolicy
	now    func() time.Time

	group singleflight.Group
	mu    sync.Mutex
	cache map[string]cachedDoc
	// failed are the URLs whose last fetch failed, and why.
	failed map[string]failedDoc
	// rate and hosts bound the fetches a minute, in all and per host;
	// inFlight and hostsBusy the fetches at once.
	rate      *rate.Limiter
	hosts     map[string]*rate.Limiter
	addrs     *addrRates
	inFlight  int
	hostsBusy map[string]int
}

type cachedDoc struct {
	c       *Client
	fetched time.Time
}

type failedDoc struct {
	err error
	at  time.Time
}

func newDocuments(client *http.Client, ttl time.Duration, policy redirectPolicy, now func() time.Time) *documents {
	return &documents{client: client, ttl: ttl, policy: policy, now: now,
		cache: map[string]cachedDoc{}, failed: map[string]failedDoc{},
		rate:  rate.NewLimiter(rate.Every(time.Minute/fetchesPerMinute), fetchesPerMinute),
		hosts: map[string]*rate.Limiter{}, hostsBusy: map[string]int{},
		addrs: newAddrRates(time.Minute/addrFetchesPerMinute, addrFetchesPerMinute)}
}

// get returns the client the document at id describes, from the cache
// when it is fresh.
func (d *documents) get(ctx context.Context, id string) (*Client, error) {
	now := d.now()
	d.mu.Lock()
	e, ok := d.cache[id]
	f, failed := d.failed[id]
	d.mu.Unlock()
	if ok && now.Sub(e.fetched) < d.ttl {
		return e.c, nil
	}
	var err error
	var c *Client
	if failed && now.Sub(f.at) < failedDocTTL {
		err = f.err
	} else {
		var v any
		v, err, _ = d.group.Do(id, func() (any, error) {
			// A fetch outlives a cancelled caller that others may share.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), documentTimeout)
			defer cancel()
			return d.limitedFetch(fctx, id)
		})
		if err == nil {
			c = v.(*Client)
		}
	}
	var fe *fetchError
	if err != nil && ok && errors.As(err, &fe) && d.now().Sub(e.fetched) < maxStaleDoc {
		// The document cannot be fetched now (its host down, the network,
		// the limits): the one fetched last serves a while longer, so that
		// its client's refreshes are not refused as invalid_client
		// meanwhile.
		return e.c, nil
	}
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if len(d.cache) >= maxCachedDocs {
		evict(d.cache, maxCachedDocs, func(e cachedDoc) bool { return now.Sub(e.fetched) >= maxStaleDoc })
	}
	d.cache[id] = cachedDoc{c: c, fetched: d.now()}
	d.mu.Unlock()
	return c, nil
}

// evict makes room in a map of at most limit entries: it deletes the
// dead ones, or else one at random.
func evict[V any](m map[string]V, limit int, dead func(V) bool) {
	for k, v := range m {
		if dead(v) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) < limit {
			return
		}
		delete(m, k)
	}
}

// limitedFetch fetches the document at id within the limits, and
// remembers a failure for failedDocTTL.
func (d *documents) limitedFetch(ctx context.Context, id string) (*Client, error) {
	if err := checkDocumentURL(id); err != nil {
		return nil, err
	}
	u, _ := url.Parse(id)
	host := strings.ToLower(u.Hostname())
	release, err := d.acquire(host, requesterAddr(ctx))
	if err != nil {
		return nil, &fetchError{url: id, err: err}
	}
	c, err := d.fetch(ctx, id)
	release()
	if err != nil {
		now := d.now()
		d.mu.Lock()
		if len(d.failed) >= maxFailedDocs {
			evict(d.failed, maxFailedDocs, func(f failedDoc) bool { return now.Sub(f.at) >= failedDocTTL })
		}
		d.failed[id] = failedDoc{err: err, at: now}
		d.mu.Unlock()
		return nil, err
	}
	d.mu.Lock()
	delete(d.failed, id)
	d.mu.Unlock()
	return c, nil
}

// acquire takes a fetch from the limits of the requester's address addr
// (first: one client cannot use up the rest) and of host, or refuses it
// with errTooManyFetches; release gives the in-flight slot back.
func (d *documents) acquire(host, addr string) (release func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.addrs.has(addr, d.now()) {
		return nil, errAddrFetches
	}
	if d.inFlight >= fetchesInFlight || d.hostsBusy[host] >= hostFetchesInFlight {
		return nil, fmt.Errorf("%w at once", errTooManyFetches)
	}
	hl := d.hosts[host]
	if hl == nil {
		if len(d.hosts) >= maxFetchHosts {
			// A host's limiter forgotten starts again with its burst, which
			// the overall rate still bounds.
			clear(d.hosts)
		}
		hl = rate.NewLimiter(rate.Every(time.Minute/hostFetchesPerMinute), hostFetchesPerMinute)
		d.hosts[host] = hl
	}
	now := d.now()
	if hl.TokensAt(now) < 1 || !d.rate.AllowN(now, 1) {
		return nil, fmt.Errorf("%w a minute", errTooManyFetches)
	}
	hl.AllowN(now, 1)
	d.addrs.take(addr, now)
	d.inFlight++
	d.hostsBusy[host]++
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.inFlight--
		if d.hostsBusy[host]--; d.hostsBusy[host] <= 0 {
			delete(d.hostsBusy, host)
		}
	}, nil
}

// fetch reads and checks the document at id.
func (d *documents) fetch(ctx context.Context, id string) (*Client, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, fmt.Errorf("client_id %q: %w", clip(id), err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, &fetchError{url: id, err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDocumentBytes))
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return nil, &fetchError{url: id, err: fmt.Errorf("HTTP %d", resp.StatusCode)}
		}
		return nil, fmt.Errorf("fetching the client's metadata document %s: HTTP %d", clip(id), resp.StatusCode)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		return nil, fmt.Errorf("the client's metadata document %s is %q, not JSON", clip(id), clip(mt))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the client's metadata document %s: %w", clip(id), err)
	}
	if len(body) > maxDocumentBytes {
		return nil, fmt.Errorf("the client's metadata document %s is larger than %d bytes", clip(id), maxDocumentBytes)
	}
	var m clientMetadata
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("the client's metadata document %s is not valid: %w", clip(id), err)
	}
	if m.ClientID != id {
		return nil, fmt.Errorf("the client's metadata document %s names client_id %q, not its own URL", clip(id), clip(m.ClientID))
	}
	c, err := d.policy.toClient(&m, true)
	if err != nil {
		return nil, fmt.Errorf("the client's metadata document %s: %w", clip(id), err)
	}
	c.ID, c.Created = id, d.now()
	return c, nil
}

// fetchError is a metadata document that could not be fetched (no
// answer, or the server's own trouble: 5xx, 429). Why (a name that
// resolves to an internal address, a refused or unreachable port, TLS)
// is logged, never told: anyone may name any URL, and the answer would
// map what the host can reach.
type fetchError struct {
	url string
	err error
}

func (e *fetchError) Error() string {
	return fmt.Sprintf("fetching the client's metadata document %s: %v", clip(e.url), e.err)
}

func (e *fetchError) Unwrap() error { return e.err }

// public is what the client and the person are told.
func (e *fetchError) public() string {
	if errors.Is(e.err, errAddrFetches) {
		return fmt.Sprintf("its metadata document %s was not fetched: too many client metadata documents were asked for from your address; try again in a minute.", clip(e.url))
	}
	if errors.Is(e.err, errTooManyFetches) {
		return fmt.Sprintf("its metadata document %s was not fetched: this server is fetching too many client metadata documents; try again in a minute.", clip(e.url))
	}
	return fmt.Sprintf("its metadata document %s could not be fetched.", clip(e.url))
}

// documentClient is the fetcher of metadata documents: every connection
// dialed through guard (so that a client_id naming an internal address,
// or a name resolving to one, reaches nothing), bounded in time, no
// redirect followed (a document is at its client_id).
func documentClient(guard *netguard.Policy, tlsConf *tls.Config) *http.Client {
	tr := guard.Transport()
	tr.Proxy = nil // a proxy would dial for us, unchecked
	if tlsConf != nil {
		tr.TLSClientConfig = tlsConf.Clone()
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       documentTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// errorCode returns the RFC 7591 error code of a refused registration.
func errorCode(err error) (code, desc string) {
	var me *metadataError
	if errors.As(err, &me) {
		return me.code, me.Error()
	}
	return "invalid_client_metadata", err.Error()
}

// clip shortens untrusted text for a message.
func clip(s string) string {
	if len(s) <= 200 {
		return s
	}
	return s[:200] + "…"
}
