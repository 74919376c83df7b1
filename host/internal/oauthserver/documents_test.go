package oauthserver_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/agenthost/agenthost/host/internal/oauthserver"
)

// TestClientDocumentLimits: a flood of distinct client_ids naming
// metadata documents on one host makes the server fetch at most its
// per-host budget (20 a minute, 4 at once); the others are refused as
// invalid_client saying why, and logged (rate-limited); a document that
// failed is not fetched again for a while.
func TestClientDocumentLimits(t *testing.T) {
	var (
		fetches, busy, maxBusy atomic.Int64
		hold                   = make(chan struct{})
	)
	ds := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		n := busy.Add(1)
		defer busy.Add(-1)
		for m := maxBusy.Load(); n > m && !maxBusy.CompareAndSwap(m, n); m = maxBusy.Load() {
		}
		if strings.HasPrefix(r.URL.Path, "/slow/") {
			select {
			case <-hold:
			case <-time.After(3 * time.Second):
			}
		}
		if strings.HasPrefix(r.URL.Path, "/missing/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": "https://" + r.Host + r.URL.Path, "client_name": "Doc app",
			"redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none"})
	}))
	defer ds.Close()
	opts := &oauthserver.Options{DocumentAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		DocumentTLS: ds.Client().Transport.(*http.Transport).TLSClientConfig}
	e := newEnv(t, opts)
	b := e.browser("alice")
	authorize := func(id string) page {
		return b.get(e.config(id).AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	}

	// At once: documents that take their time; at most 4 fetched together.
	const flood = 30
	var (
		wg       sync.WaitGroup
		refused  atomic.Int64
		answered = make(chan struct{}, flood)
	)
	for i := range flood {
		wg.Go(func() {
			r := authorize(fmt.Sprintf("%s/slow/%d.json", ds.URL, i))
			if r.code != http.StatusOK {
				if !strings.Contains(r.body, "too many client metadata documents") {
					t.Errorf("a refused client: %d, want the reason\n%s", r.code, r.body)
				}
				refused.Add(1)
			}
			answered <- struct{}{}
		})
	}
	for range flood - 4 {
		<-answered // the ones not held by the document server
	}
	close(hold)
	wg.Wait()
	if got := maxBusy.Load(); got > 4 {
		t.Errorf("%d fetches at once of one host's documents, want at most 4", got)
	}
	if refused.Load() < flood-4 {
		t.Errorf("%d of %d clients refused, want at least %d", refused.Load(), flood, flood-4)
	}

	// One after the other: at most 20 a minute.
	for i := range 40 {
		authorize(fmt.Sprintf("%s/app/%d.json", ds.URL, i))
	}
	if got := fetches.Load(); got > 20 {
		t.Errorf("%d fetches of one host's documents within a minute, want at most 20", got)
	}
	// invalid_client at the token endpoint, with the reason.
	resp, err := http.PostForm(e.srv.URL+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "code": {"x"},
		"redirect_uri": {redirect}, "code_verifier": {oauth2.GenerateVerifier()}, "client_id": {ds.URL + "/app/new.json"}})
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Error, ErrorDescription string }
	_ = json.NewDecoder(resp.Body).Decode(&struct {
		Error            *string `json:"error"`
		ErrorDescription *string `json:"error_description"`
	}{&body.Error, &body.ErrorDescription})
	resp.Body.Close()
	if body.Error != "invalid_client" || !strings.Contains(body.ErrorDescription, "too many client metadata documents") {
		t.Errorf("the token endpoint over the limit: %d %+v, want invalid_client saying why", resp.StatusCode, body)
	}
	if !strings.Contains(e.logs.String(), "too many client metadata document fetches") {
		t.Errorf("the refusals are not logged:\n%s", e.logs.String())
	}

	// A document that failed is not fetched again for a while.
	e2 := newEnv(t, opts)
	before := fetches.Load()
	for range 5 {
		r := e2.browser("alice").get(e2.config(ds.URL+"/missing/app.json").AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
		if r.code == http.StatusOK || !strings.Contains(r.body, "HTTP 404") {
			t.Errorf("a missing document: %d, want refused with its status\n%s", r.code, r.body)
		}
	}
	if got := fetches.Load() - before; got != 1 {
		t.Errorf("a missing document asked for 5 times was fetched %d times, want once", got)
	}
}

// TestClientDocumentLimitsOverall: documents spread over many hosts are
// fetched at most 60 a minute in all.
func TestClientDocumentLimitsOverall(t *testing.T) {
	var fetches atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": "https://" + r.Host + r.URL.Path, "client_name": "Doc app",
			"redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none"})
	})
	// Four hosts: 127.0.0.1 to 127.0.0.4, all loopback.
	var urls []string
	for i := 1; i <= 4; i++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i))
		if err != nil && os.Getenv("CI") != "true" {
			t.Skipf("SKIPPED: needs loopback addresses besides 127.0.0.1 (Linux has 127.0.0.0/8 on lo): %v", err)
		}
		if err != nil {
			t.Fatalf("listening on 127.0.0.%d: %v", i, err)
		}
		ds := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
		ds.StartTLS()
		defer ds.Close()
		urls = append(urls, ds.URL)
	}
	// The test's servers' certificate names 127.0.0.1 only.
	e := newEnv(t, &oauthserver.Options{DocumentAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		DocumentTLS: &tls.Config{InsecureSkipVerify: true}})
	b := e.browser("alice")
	refused := 0
	for _, u := range urls {
		for i := range 20 {
			r := b.get(e.config(fmt.Sprintf("%s/app/%d.json", u, i)).AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
			if r.code != http.StatusOK {
				if !strings.Contains(r.body, "too many client metadata documents") {
					t.Errorf("%d, want the consent page or a refusal saying why\n%s", r.code, r.body)
				}
				refused++
			}
		}
	}
	if got := fetches.Load(); got > 60 || refused < 80-60 {
		t.Errorf("%d fetches of 80 documents on 4 hosts within a minute, %d refused: want at most 60 fetches", got, refused)
	}
}
