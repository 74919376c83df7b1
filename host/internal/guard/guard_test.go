package guard

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/host/internal/hosttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAddrKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"192.0.2.1:5555":                  "192.0.2.1",
		"192.0.2.1":                       "192.0.2.1",
		"[::ffff:192.0.2.1]:80":           "192.0.2.1",
		"[2001:db8:1:2:3:4:5:6]:443":      "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443":      "2001:db8:1:2::/64",
		"[2001:db8:1:3:3:4:5:6]:443":      "2001:db8:1:3::/64",
		"2001:db8:1:2:3:4:5:6":            "2001:db8:1:2::/64",
		"[2001:0db8:0000:0000::1]:65535":  "2001:db8::/64",
		"[2001:db8:0:0:ffff:ffff::]:1234": "2001:db8::/64",
		"[fe80::1%eth0]:1":                "fe80::/64",
		"not an address":                  "not an address",
		"@":                               "@",
		// All of loopback is one key: rotating 127/8 gains nothing.
		"127.0.0.1:1":       LoopbackKey,
		"127.0.0.2:1":       LoopbackKey,
		"127.0.0.255":       LoopbackKey,
		"127.255.255.254:9": LoopbackKey,
		"[::1]:7777":        LoopbackKey,
		"::1":               LoopbackKey,
		"[::ffff:7f00:1]:1": LoopbackKey,
		"::ffff:127.3.2.1":  LoopbackKey,
		"128.0.0.1:1":       "128.0.0.1",
		"[::2]:1":           "::/64",
	} {
		if got := AddrKey(in); got != want {
			t.Errorf("AddrKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNewTrustedProxies(t *testing.T) {
	t.Parallel()
	tp, err := NewTrustedProxies([]string{"10.0.0.0/8", " 192.0.2.1 ", "2001:db8::/32", "10.1.2.3/8"})
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]bool{"10.9.9.9": true, "192.0.2.1": true, "192.0.2.2": false, "2001:db8:5::1": true,
		"::ffff:10.0.0.1": true, "2001:db9::1": false, "127.0.0.1": false} {
		if got := tp.Trusts(netip.MustParseAddr(ip)); got != want {
			t.Errorf("Trusts(%s) = %v, want %v", ip, got, want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "10.0.0.300/8", "proxy.example", "10.0.0.0/8/8", ""} {
		if _, err := NewTrustedProxies([]string{"10.0.0.0/8", bad}); err == nil || !strings.Contains(err.Error(), `entry 1 ("`+bad+`")`) {
			t.Errorf("NewTrustedProxies with %q = %v, want an error naming the entry", bad, err)
		}
	}
	if (*TrustedProxies)(nil).Trusts(netip.MustParseAddr("10.0.0.1")) {
		t.Error("nil trusts a proxy")
	}
}

func req(remote string, xff ...string) *http.Request {
	r, _ := http.NewRequest("GET", "http://127.0.0.1/", nil)
	r.RemoteAddr = remote
	for _, v := range xff {
		r.Header.Add("X-Forwarded-For", v)
	}
	return r
}

// TestClientAddr: X-Forwarded-For is believed only from a trusted proxy,
// and only up to the rightmost address that is not a trusted proxy; a
// client's spoofed entries are ignored.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	trusted, err := NewTrustedProxies([]string{"10.0.0.0/8", "2001:db8:ffff::/48", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		tp   *TrustedProxies
		r    *http.Request
		want string
	}{
		"no proxies: spoofed XFF ignored":    {nil, req("203.0.113.5:4711", "198.51.100.1"), "203.0.113.5"},
		"untrusted peer: spoofed XFF":        {trusted, req("203.0.113.5:4711", "10.1.1.1, 198.51.100.1"), "203.0.113.5"},
		"untrusted loopback peer":            {trusted, req("127.0.0.2:1", "198.51.100.1"), "127.0.0.2"},
		"trusted peer, no XFF":               {trusted, req("10.0.0.1:80"), "10.0.0.1"},
		"trusted peer":                       {trusted, req("10.0.0.1:80", "198.51.100.7"), "198.51.100.7"},
		"trusted loopback peer":              {trusted, req("127.0.0.1:80", "198.51.100.7"), "198.51.100.7"},
		"client's spoofed entries left":      {trusted, req("10.0.0.1:80", "1.1.1.1, 6.6.6.6, 198.51.100.7"), "198.51.100.7"},
		"client spoofs a trusted proxy":      {trusted, req("10.0.0.1:80", "10.9.9.9, 198.51.100.7"), "198.51.100.7"},
		"two trusted hops":                   {trusted, req("10.0.0.1:80", "6.6.6.6, 198.51.100.7, 10.0.0.2"), "198.51.100.7"},
		"several header lines":               {trusted, req("10.0.0.1:80", "6.6.6.6", "198.51.100.7,10.0.0.2", "10.0.0.3"), "198.51.100.7"},
		"entries with ports":                 {trusted, req("10.0.0.1:80", "198.51.100.7:5555, [2001:db8:ffff::1]:443"), "198.51.100.7"},
		"IPv6 client":                        {trusted, req("[2001:db8:ffff::2]:443", "2001:db8:1:2::99"), "2001:db8:1:2::99"},
		"IPv4-mapped":                        {trusted, req("[::ffff:10.0.0.1]:80", "::ffff:198.51.100.7"), "198.51.100.7"},
		"all trusted: the leftmost":          {trusted, req("10.0.0.1:80", "10.0.0.9, 10.0.0.2"), "10.0.0.9"},
		"malformed rightmost: the proxy":     {trusted, req("10.0.0.1:80", "198.51.100.7, unknown"), "10.0.0.1"},
		"malformed behind a trusted hop":     {trusted, req("10.0.0.1:80", "garbage, 10.0.0.2"), "10.0.0.2"},
		"empty entry":                        {trusted, req("10.0.0.1:80", "198.51.100.7,"), "10.0.0.1"},
		"not TCP":                            {trusted, req("@", "198.51.100.7"), "@"},
		"zone dropped":                       {nil, req("[fe80::1%eth0]:1"), "fe80::1"},
		"rotating XFF from an untrusted one": {trusted, req("198.51.100.9:1", "10.0.0.1"), "198.51.100.9"},
	} {
		if got := c.tp.ClientAddr(c.r); got != c.want {
			t.Errorf("%s: ClientAddr = %q, want %q", name, got, c.want)
		}
	}
	// Key groups as AddrKey does.
	if k := trusted.Key(req("10.0.0.1:80", "2001:db8:1:2::99")); k != "2001:db8:1:2::/64" {
		t.Errorf("Key = %q", k)
	}
	if k := (*TrustedProxies)(nil).Key(req("127.0.0.3:1", "198.51.100.7")); k != LoopbackKey {
		t.Errorf("Key of a loopback peer with a spoofed XFF = %q, want %q", k, LoopbackKey)
	}
}

type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }

func TestHostAllowed(t *testing.T) {
	t.Parallel()
	allowed := []string{HostOf("https://Agents.Example.com:8443/base")}
	if allowed[0] != "agents.example.com" {
		t.Fatalf("HostOf = %q", allowed[0])
	}
	for name, c := range map[string]struct {
		local, host string
		want        bool
	}{
		"loopback, loopback host":       {"127.0.0.1:7777", "127.0.0.1:7777", true},
		"loopback, localhost":           {"127.0.0.1:7777", "localhost:7777", true},
		"loopback, sub.localhost":       {"127.0.0.1:7777", "app.localhost", true},
		"loopback, [::1]":               {"[::1]:7777", "[::1]:7777", true},
		"loopback, rebound name":        {"127.0.0.1:7777", "evil.example:7777", false},
		"loopback, rebound name, dot":   {"127.0.0.1:7777", "evil.example.", false},
		"loopback, public host":         {"127.0.0.1:7777", "agents.example.com", true},
		"loopback, public host, case":   {"127.0.0.1:7777", "AGENTS.example.com.:443", true},
		"loopback, public host suffix":  {"127.0.0.1:7777", "agents.example.com.evil", false},
		"loopback, empty host":          {"127.0.0.1:7777", "", false},
		"public bind: not checked here": {"192.0.2.1:443", "anything.example", true},
	} {
		r, _ := http.NewRequest("GET", "http://x/", nil)
		r.Host = c.host
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(addr(c.local))))
		if got := HostAllowed(r, allowed); got != c.want {
			t.Errorf("%s: HostAllowed = %v, want %v", name, got, c.want)
		}
	}
	r, _ := http.NewRequest("GET", "http://evil.example/", nil)
	if !HostAllowed(r, nil) {
		t.Error("a request without a local address (not from a server) was refused")
	}
}

type syncBuffer = hosttest.LogBuffer

// TestRefusalLog: a flood of one reason logs its burst, then one line per
// interval preceded by the count suppressed meanwhile; reasons have their
// own budgets; Flush reports what is pending.
func TestRefusalLog(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	l := NewRefusalLog(&RefusalLogOptions{Burst: 3, Every: time.Second, Now: clock})

	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 100 {
				l.Refused(logger, "mcp: refused an invalid token", "addr", "loopback")
			}
		})
	}
	wg.Wait()
	l.Refused(logger, "mcp: refused a foreign origin", "origin", "http://evil.example")
	out := buf.String()
	if n := strings.Count(out, "refused an invalid token"); n != 3 {
		t.Errorf("1000 refusals logged %d lines, want the burst of 3:\n%s", n, out)
	}
	if !strings.Contains(out, "refused a foreign origin") {
		t.Error("another reason was suppressed with the first")
	}
	advance(time.Second)
	l.Refused(logger, "mcp: refused an invalid token", "addr", "loopback")
	out = buf.String()
	if !strings.Contains(out, `msg="similar refusals suppressed" reason="mcp: refused an invalid token" suppressed=997 since=2026-03-01T12:00:00Z`) {
		t.Errorf("no summary of the 997 suppressed lines:\n%s", out)
	}
	l.Refused(logger, "mcp: refused an invalid token")
	l.Refused(logger, "mcp: refused an invalid token")
	l.Flush()
	l.Flush()
	if n := strings.Count(buf.String(), "suppressed=2 "); n != 1 {
		t.Errorf("Flush logged the pending count %d times, want once:\n%s", n, buf.String())
	}

	// A client's long header is cut.
	l.Refused(logger, "long", "host", strings.Repeat("h", 10000))
	if out := buf.String(); strings.Contains(out, strings.Repeat("h", 257)) || !strings.Contains(out, strings.Repeat("h", 256)+"…") {
		t.Errorf("a long argument was not cut to 256 bytes")
	}

	// A nil RefusalLog logs every line.
	var nilLog *RefusalLog
	for range 10 {
		nilLog.Refused(logger, "nil log")
	}
	nilLog.Flush()
	if n := strings.Count(buf.String(), "nil log"); n != 10 {
		t.Errorf("a nil RefusalLog logged %d of 10", n)
	}
}

func TestPathOf(t *testing.T) {
	for in, want := range map[string]string{
		"https://example.com/agenthost":   "/agenthost",
		"https://example.com/agenthost/":  "/agenthost",
		"https://example.com/a/b/":        "/a/b",
		"https://example.com":             "",
		"https://example.com/":            "",
		"":                                "",
		"http://[::1]:7777/x":             "/x",
		"https://example.com/%zz-not-url": "",
	} {
		if got := PathOf(in); got != want {
			t.Errorf("PathOf(%q) = %q, want %q", in, got, want)
		}
	}
}
