package netguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext/netguard"
)

func TestBlocked(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1":                            true,
		"127.255.255.254":                      true,
		"::1":                                  true,
		"::ffff:127.0.0.1":                     true, // IPv4-mapped
		"0.0.0.0":                              true,
		"::":                                   true,
		"10.1.2.3":                             true,
		"172.16.0.1":                           true,
		"172.31.255.255":                       true,
		"192.168.1.1":                          true,
		"169.254.169.254":                      true, // cloud metadata
		"fe80::1":                              true,
		"fe80::1%eth0":                         true,
		"fd00::1":                              true,
		"100.64.0.1":                           true, // CGNAT
		"224.0.0.1":                            true,
		"ff02::1":                              true,
		"255.255.255.255":                      true,
		"198.18.0.1":                           true,
		"64:ff9b::a9fe:a9fe":                   true, // NAT64 of 169.254.169.254
		"2002:7f00:1::":                        true, // 6to4 of 127.0.0.1
		"2001:0:4136:e378:8000:63bf:80ff:fffe": true, // Teredo of 127.0.0.1
		"8.8.8.8":                              false,
		"1.1.1.1":                              false,
		"172.32.0.1":                           false,
		"100.128.0.1":                          false,
		"2606:4700:4700::1111":                 false,
		"64:ff9b::808:808":                     false, // NAT64 of 8.8.8.8
	} {
		ip := netip.MustParseAddr(addr)
		reason, got := netguard.Blocked(ip)
		if got != want {
			t.Errorf("Blocked(%s) = %v (%q), want %v", addr, got, reason, want)
		}
	}
}

func TestCheckAllowAndDeny(t *testing.T) {
	t.Parallel()
	allow, err := netguard.ParsePrefixes([]string{"127.0.0.1", "10.20.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	p := &netguard.Policy{Allow: allow, Deny: []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:7777"), netip.MustParseAddrPort("10.20.0.5:443")}}
	for ap, want := range map[string]bool{
		"127.0.0.1:80":          true,
		"[::ffff:127.0.0.1]:80": true,
		"127.0.0.2:80":          false,
		"10.20.3.4:443":         true,
		"10.20.0.5:443":         false, // denied though allowed
		"10.21.0.1:443":         false,
		"127.0.0.1:7777":        false, // the host's own port on loopback
		"8.8.8.8:443":           true,
	} {
		err := p.Check(netip.MustParseAddrPort(ap))
		if (err == nil) != want {
			t.Errorf("Check(%s) = %v, want allowed=%v", ap, err, want)
		}
		if err != nil && !errors.Is(err, netguard.ErrBlocked) {
			t.Errorf("Check(%s) = %v, which does not wrap ErrBlocked", ap, err)
		}
	}
	if _, err := netguard.ParsePrefixes([]string{"10.0.0.0/8", "nope"}); err == nil || !strings.Contains(err.Error(), `entry 1 ("nope")`) {
		t.Errorf("ParsePrefixes with a bad entry = %v, want it named", err)
	}
}

// TestDialRefused dials real listeners: the name localhost resolves to a
// loopback address, which the dial-time hook refuses; an allowed prefix
// passes.
func TestDialRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	ctx := context.Background()
	for _, host := range []string{"localhost", "127.0.0.1", "[::ffff:127.0.0.1]"} {
		_, err := (&netguard.Policy{}).Dialer(time.Second).DialContext(ctx, "tcp", fmt.Sprintf("%s:%d", host, port))
		if !errors.Is(err, netguard.ErrBlocked) {
			t.Errorf("dialing %s = %v, want ErrBlocked", host, err)
		}
	}
	p := &netguard.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	c, err := p.Dialer(time.Second).DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("dialing an allowed address: %v", err)
	}
	c.Close()
}

// TestDenyUnspecifiedReachesLoopback: a host listening on loopback only
// (127.0.0.1:P, [::1]:P) is reached by a dial of 0.0.0.0:P or [::]:P (the
// kernel sends those to loopback), which its Deny entry refuses even where
// every address is allowed (the operator's servers).
func TestDenyUnspecifiedReachesLoopback(t *testing.T) {
	t.Parallel()
	everywhere := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	for _, listen := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			t.Logf("no listener on %s here: %v", listen, err)
			continue
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		self := netip.MustParseAddrPort(ln.Addr().String())
		p := &netguard.Policy{Allow: everywhere, Deny: []netip.AddrPort{self}}
		for _, host := range []string{"0.0.0.0", "[::]", "[::ffff:0.0.0.0]"} {
			addr := fmt.Sprintf("%s:%d", host, self.Port())
			c, err := p.Dialer(time.Second).DialContext(context.Background(), "tcp", addr)
			if err == nil {
				c.Close()
				t.Errorf("dialing %s reached the host's own %s", addr, self)
			} else if !errors.Is(err, netguard.ErrBlocked) {
				t.Logf("dialing %s: %v (not reached)", addr, err)
			}
		}
	}
}

// TestRedirectHopChecked: an allowed server redirects to a refused one
// (the other's port is denied); the client follows the redirect and the
// hop's dial is refused.
func TestRedirectHopChecked(t *testing.T) {
	t.Parallel()
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "secret metadata")
	}))
	defer inner.Close()
	outer := httptest.NewServer(http.RedirectHandler(inner.URL, http.StatusFound))
	defer outer.Close()
	p := &netguard.Policy{
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Deny:  []netip.AddrPort{netip.MustParseAddrPort(inner.Listener.Addr().String())},
	}
	c := p.Client(5 * time.Second)
	defer c.CloseIdleConnections()
	resp, err := c.Get(outer.URL)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("the redirect to %s was followed: %q", inner.URL, b)
	}
	if !errors.Is(err, netguard.ErrBlocked) {
		t.Errorf("following the redirect = %v, want ErrBlocked", err)
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{
		"https://mcp.example.com/mcp":  true,
		"http://127.0.0.1:8080/mcp":    true,
		"http://localhost/mcp":         true,
		"http://[::1]:9/mcp":           true,
		"http://mcp.example.com/mcp":   false,
		"javascript:alert(1)":          false,
		"file:///etc/passwd":           false,
		"gopher://127.0.0.1:6379/_":    false,
		"https://user:pw@example.com/": false,
		"https:///nohost":              false,
		"https://example.com/#frag":    false,
	} {
		_, err := netguard.CheckURL(raw, false)
		if (err == nil) != ok {
			t.Errorf("CheckURL(%q) = %v, want ok=%v", raw, err, ok)
		}
	}
	if _, err := netguard.CheckURL("http://mcp.example.com/mcp", true); err != nil {
		t.Errorf("CheckURL with allowHTTP = %v", err)
	}
}

// FuzzBlocked checks Blocked against the standard library's predicates
// (SECURITY.md G5): whatever the 16 bytes, an address the standard library
// calls loopback, private, link-local, multicast or unspecified — directly
// or IPv4-mapped — is never allowed.
func FuzzBlocked(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::ffff:10.0.0.1", "169.254.169.254", "fe80::1", "8.8.8.8", "::"} {
		b := netip.MustParseAddr(s).As16()
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != 16 && len(b) != 4 {
			return
		}
		ip, _ := netip.AddrFromSlice(b)
		u := ip.Unmap()
		std := u.IsLoopback() || u.IsPrivate() || u.IsLinkLocalUnicast() || u.IsMulticast() || u.IsUnspecified() ||
			u.IsLinkLocalMulticast() || u.IsInterfaceLocalMulticast()
		if _, blocked := netguard.Blocked(ip); std && !blocked {
			t.Errorf("Blocked(%s) = false, but the standard library calls it internal", ip)
		}
		err := (&netguard.Policy{}).Check(netip.AddrPortFrom(ip, 443))
		if _, blocked := netguard.Blocked(ip); blocked != (err != nil) {
			t.Errorf("Check and Blocked disagree on %s: %v", ip, err)
		}
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestIsLocal: loopback, unspecified and this machine's interface
// addresses are local; a public address is not.
func TestIsLocal(t *testing.T) {
	t.Parallel()
	want := map[string]bool{"127.0.0.1": true, "::1": true, "0.0.0.0": true, "::ffff:127.0.0.2": true, "8.8.8.8": false}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			want[n.IP.String()] = true
		}
	}
	for s, w := range want {
		if got, err := netguard.IsLocal(netip.MustParseAddr(s)); got != w || err != nil {
			t.Errorf("IsLocal(%s) = %v, %v; want %v", s, got, err, w)
		}
	}
}
