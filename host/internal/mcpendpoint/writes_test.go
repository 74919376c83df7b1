package mcpendpoint_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// countingListener counts the writes on the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// TestStatelessFastOneWrite: the fast path's answer (headers and its one
// event) leaves in one write to the socket; flushing the event cost a
// second write (the chunked body's end) per call. The body is the same
// event as go-sdk's handler sends.
func TestStatelessFastOneWrite(t *testing.T) {
	e := newEnv(t, nil)
	l := &countingListener{Listener: mustListen(t)}
	srv := httptest.NewUnstartedServer(e.ep)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	body := []byte(statelessCall("1", "notes__add", `{"v":1}`))
	answers := map[bool]string{}
	for _, fast := range []bool{false, true} {
		mcpendpoint.SetStatelessFast(e.ep, fast)
		before := mcpendpoint.StatelessFastCalls(e.ep)
		req := statelessRequest(body, "notes__add")
		req.RequestURI, req.URL.Scheme, req.URL.Host, req.Host = "", "http", srv.Listener.Addr().String(), ""
		w0 := l.writes.Load()
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if took := mcpendpoint.StatelessFastCalls(e.ep) > before; took != fast || resp.StatusCode != http.StatusOK {
			t.Fatalf("fast %v: taken by the fast path %v, status %d", fast, took, resp.StatusCode)
		}
		answers[fast] = string(b)
		if n := l.writes.Load() - w0; fast && n != 1 {
			t.Errorf("the fast path answered in %d writes, want 1", n)
		}
	}
	if answers[true] != answers[false] || !strings.HasPrefix(answers[true], "event: message\ndata: ") {
		t.Errorf("the fast path sent %q, go-sdk's handler %q", answers[true], answers[false])
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}
