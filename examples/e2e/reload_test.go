package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeConfig rewrites the env's operator file with f applied to it.
func (e *env) editConfig(f func(cfg map[string]any)) {
	e.t.Helper()
	raw, err := os.ReadFile(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		e.t.Fatal(err)
	}
	f(cfg)
	raw, _ = json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(e.cfg, raw, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// mcpServers returns the mcpServers block of the env's ext-mcp config.
func mcpServers(cfg map[string]any) map[string]any {
	return cfg["extensions"].(map[string]any)["mcp"].(map[string]any)["config"].(map[string]any)["mcpServers"].(map[string]any)
}

// waitChanged waits for a list_changed on c's session (at most 30 s: a
// bound on a hang, not a measured time).
func (c *client) waitChanged(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.changed:
	case <-time.After(30 * time.Second):
		t.Fatalf("no notifications/tools/list_changed after %s", what)
	}
}

// TestReloadInPlace: `agenthost reload` adds a server to the running
// host and removes one while a go-sdk client's session stays open (it
// hears list_changed each time, and its tool list follows); a file that
// does not parse, an ext-mcp block ext-mcp refuses, and a changed listen
// are refused naming the culprit, and change nothing; every reload is in
// the audit log.
func TestReloadInPlace(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}},
	}, map[string]any{"telemetry": map[string]any{"metrics": true}})
	e.startServe()
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e"))
	c, err := connect(t, e.url, tok)
	if err != nil {
		t.Fatal(err)
	}
	if names := c.names(t); !slices.Contains(names, "notes__echo") {
		t.Fatalf("alice's tools before the reload: %v", names)
	}
	drain := func() {
		for {
			select {
			case <-c.changed:
			default:
				return
			}
		}
	}
	drain()

	// Add a server.
	e.editConfig(func(cfg map[string]any) { mcpServers(cfg)["more"] = map[string]any{"command": b.notes} })
	out := e.must("", "reload")
	if !strings.Contains(out, "extensions.mcp.config") {
		t.Errorf("reload printed %q; want the changed block named", out)
	}
	c.waitChanged(t, "a reload that added a server")
	names := c.names(t)
	if !slices.Contains(names, "more__echo") || !slices.Contains(names, "notes__echo") {
		t.Fatalf("after adding more: %v; want more__echo beside notes__echo", names)
	}
	if res, err := c.call(t, "more__echo", map[string]any{"text": "hi"}); err != nil || res.IsError {
		t.Fatalf("calling the added server on the same session: %v %v", err, res)
	}

	// Remove one.
	drain()
	e.editConfig(func(cfg map[string]any) { delete(mcpServers(cfg), "notes") })
	e.must("", "reload")
	c.waitChanged(t, "a reload that removed a server")
	names = c.names(t)
	if slices.Contains(names, "notes__echo") || !slices.Contains(names, "more__echo") {
		t.Fatalf("after removing notes: %v; want notes gone and more kept", names)
	}
	if res, err := c.call(t, "notes__echo", map[string]any{"text": "hi"}); err == nil && !res.IsError {
		t.Errorf("the removed server still answers: %s", text(res))
	}

	// A file that does not parse: refused, naming the line; nothing changes.
	good, _ := os.ReadFile(e.cfg)
	if err := os.WriteFile(e.cfg, []byte("{\n  \"dataDir\": \"data\",\n  oops\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := e.run("", "reload")
	if code == 0 || !strings.Contains(errOut, "line 3") {
		t.Errorf("reload of a broken file: exit %d, %q; want a refusal naming line 3", code, errOut)
	}
	// An ext-mcp block that ext-mcp refuses (its dry run): named.
	if err := os.WriteFile(e.cfg, good, 0o600); err != nil {
		t.Fatal(err)
	}
	e.editConfig(func(cfg map[string]any) {
		mcpServers(cfg)["bad"] = map[string]any{"command": b.notes, "timeot": "5s"}
		delete(mcpServers(cfg), "more")
	})
	_, errOut, code = e.run("", "reload")
	if code == 0 || !strings.Contains(errOut, "extensions.mcp.config") || !strings.Contains(errOut, "timeot") {
		t.Errorf("reload of a bad server block: exit %d, %q; want a refusal naming extensions.mcp.config and the field", code, errOut)
	}
	// listen cannot change in place.
	if err := os.WriteFile(e.cfg, good, 0o600); err != nil {
		t.Fatal(err)
	}
	e.editConfig(func(cfg map[string]any) {
		cfg["listen"] = "127.0.0.1:1"
		delete(mcpServers(cfg), "more")
	})
	_, errOut, code = e.run("", "reload")
	if code == 0 || !strings.Contains(errOut, "listen: cannot change without a restart") {
		t.Errorf("reload with a new listen: exit %d, %q; want a refusal naming listen", code, errOut)
	}
	// None of the refused files changed anything: more is still there.
	if names := c.names(t); !slices.Contains(names, "more__echo") {
		t.Errorf("a refused reload changed the tools: %v", names)
	}
	if res, err := c.call(t, "more__echo", map[string]any{"text": "still"}); err != nil || res.IsError {
		t.Errorf("after the refused reloads: %v %v", err, res)
	}

	var ok, refused int
	for _, r := range e.auditLines("--kind", "reload") {
		switch r.Outcome {
		case "ok":
			ok++
		case "refused":
			refused++
		}
	}
	if ok != 2 || refused != 3 {
		t.Errorf("audit log has %d reloads done and %d refused; want 2 and 3", ok, refused)
	}
	// And counted in /metrics, by outcome.
	op := strings.TrimSpace(e.must("", "token", "create", "--operator", "--name", "ops"))
	code, body := e.api("GET", "/metrics", op, "")
	for outcome, n := range map[string]int{"ok": 2, "refused": 3} {
		re := regexp.MustCompile(`agenthost_reloads_total\{[^}]*outcome="` + outcome + `"[^}]*\} ` + strconv.Itoa(n) + `\b`)
		if code != 200 || !re.MatchString(body) {
			t.Errorf("/metrics (HTTP %d) does not count %d reloads %s:\n%s", code, n, outcome, body)
		}
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 with serial
// serial, and its key, to certFile and keyFile.
func writeCert(t *testing.T, certFile, keyFile string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// The key first: the host reads the pair when told to, never half.
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// servedSerial opens a new TLS connection to the host and returns the
// serial of the certificate it served.
func servedSerial(t *testing.T, base string) int64 {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the test reads the served certificate itself
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestReloadRenewedCertificate: a renewed certificate and key written
// over the old files are served to new TLS connections after SIGHUP, and
// again after `agenthost reload`, without a restart (the same process
// serves).
func TestReloadRenewedCertificate(t *testing.T) {
	b := build(t)
	dir := t.TempDir()
	certFile, keyFile := dir+"/cert.pem", dir+"/key.pem"
	writeCert(t, certFile, keyFile, 1001)
	e := newEnv(t, b, map[string]any{}, map[string]any{"tls": map[string]any{"certFile": certFile, "keyFile": keyFile}})
	e.startServe()
	if !strings.HasPrefix(e.url, "https://") {
		t.Fatalf("serve URL %q; want https", e.url)
	}
	pid := e.serve.Process.Pid
	if got := servedSerial(t, e.url); got != 1001 {
		t.Fatalf("served serial %d; want 1001", got)
	}
	// (The files' watcher may take the pair first: TestCertificateFileWatch.)
	writeCert(t, certFile, keyFile, 1002)
	if err := e.serve.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// SIGHUP answers nothing: wait for the renewed certificate (bounded).
	deadline := time.Now().Add(30 * time.Second)
	for servedSerial(t, e.url) != 1002 {
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate was not served after SIGHUP\n%s", e.serveOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	writeCert(t, certFile, keyFile, 1003)
	if out := e.must("", "reload"); !strings.Contains(out, "tls") {
		t.Errorf("reload printed %q; want tls named", out)
	}
	if got := servedSerial(t, e.url); got != 1003 {
		t.Errorf("served serial %d after agenthost reload; want 1003", got)
	}
	// A key that does not match: refused, the old pair kept.
	writeCert(t, certFile, dir+"/other.pem", 1004)
	_, errOut, code := e.run("", "reload")
	if code == 0 || !strings.Contains(errOut, "tls") {
		t.Errorf("reload with a mismatched key: exit %d, %q; want a refusal naming tls", code, errOut)
	}
	if got := servedSerial(t, e.url); got != 1003 {
		t.Errorf("served serial %d after a refused reload; want 1003 kept", got)
	}
	if e.serve.Process.Pid != pid || e.serve.ProcessState != nil {
		t.Error("the host restarted")
	}
}

// TestReloadRestartsAnExtension: a new config block for an extension
// that cannot take one in place (hello has no reconfigure capability),
// and an ext-mcp block whose maxResultBytes changed (its connections are
// built with it), restart that extension alone with the new block,
// saying so; the other keeps its process; both answer after.
func TestReloadRestartsAnExtension(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}},
	}, map[string]any{"extensions": map[string]any{"hello": map[string]any{"path": b.hello, "config": map[string]any{"v": 1}}}})
	e.startServe()
	pids := func() map[string]int {
		var exts []struct {
			Name string `json:"name"`
			PID  int    `json:"pid"`
		}
		if err := json.Unmarshal([]byte(e.must("", "ext", "list", "--json")), &exts); err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, x := range exts {
			out[x.Name] = x.PID
		}
		return out
	}
	before := pids()
	e.editConfig(func(cfg map[string]any) {
		cfg["extensions"].(map[string]any)["hello"].(map[string]any)["config"] = map[string]any{"v": 2}
	})
	out := e.must("", "reload")
	if !strings.Contains(out, "restarted extension hello: it cannot take a new config in place") {
		t.Errorf("reload printed %q; want hello's restart named with why", out)
	}
	after := pids()
	if after["hello"] == before["hello"] || after["hello"] == 0 || after["mcp"] != before["mcp"] {
		t.Errorf("pids before %v, after %v; want hello's new and mcp's the same", before, after)
	}
	e.editConfig(func(cfg map[string]any) {
		cfg["extensions"].(map[string]any)["mcp"].(map[string]any)["config"].(map[string]any)["maxResultBytes"] = 1 << 20
	})
	out = e.must("", "reload")
	if !strings.Contains(out, "restarted extension mcp") || !strings.Contains(out, "maxResultBytes") {
		t.Errorf("reload printed %q; want mcp's restart naming maxResultBytes", out)
	}
	again := pids()
	if again["mcp"] == after["mcp"] || again["hello"] != after["hello"] {
		t.Errorf("pids before %v, after %v; want mcp's new and hello's the same", after, again)
	}
	names := e.toolNames("alice")
	if !slices.Contains(names, "hello/greet") || !slices.Contains(names, "notes/echo") {
		t.Errorf("tools after the restarts: %v", names)
	}
}

// TestCertificateFileWatch (issue 21): a renewed certificate and key
// written over the old files are served to new TLS connections without a
// reload or a signal (the host polls the files); a pair whose key does
// not match is not served (the old pair kept) until a good pair follows;
// the host never restarts.
func TestCertificateFileWatch(t *testing.T) {
	b := build(t)
	dir := t.TempDir()
	certFile, keyFile := dir+"/cert.pem", dir+"/key.pem"
	writeCert(t, certFile, keyFile, 2001)
	e := newEnv(t, b, map[string]any{}, map[string]any{"tls": map[string]any{"certFile": certFile, "keyFile": keyFile}})
	e.startServe()
	pid := e.serve.Process.Pid
	if got := servedSerial(t, e.url); got != 2001 {
		t.Fatalf("served serial %d; want 2001", got)
	}
	waitSerial := func(want int64, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second) // a bound on a hang, not a measured time
		for servedSerial(t, e.url) != want {
			if time.Now().After(deadline) {
				t.Fatalf("serial %d not served after %s\n%s", want, what, e.serveOut.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	writeCert(t, certFile, keyFile, 2002)
	waitSerial(2002, "the files were renewed, without a reload")
	// A certificate whose key is elsewhere: the old pair stays served; the
	// host says why in its log.
	writeCert(t, certFile, dir+"/other.pem", 2003)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(e.serveOut.String(), "does not load") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning of a pair that does not load\n%s", e.serveOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := servedSerial(t, e.url); got != 2002 {
		t.Errorf("served serial %d with a mismatched pair on disk; want 2002 kept", got)
	}
	writeCert(t, certFile, keyFile, 2004)
	waitSerial(2004, "a good pair followed the mismatched one")
	if e.serve.Process.Pid != pid || e.serve.ProcessState != nil {
		t.Error("the host restarted")
	}
}
