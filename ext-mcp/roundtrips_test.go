package extmcp_test

import (
	"fmt"
	"strings"
	"testing"

	extmcp "github.com/agenthost/agenthost/ext-mcp"
)

// stdioConfig declares n stdio notes servers, s0 … s<n-1>.
func stdioConfig(n int) string {
	servers := make([]string, n)
	for i := range servers {
		servers[i] = fmt.Sprintf("%q: %s", fmt.Sprintf("s%d", i), notesServer(""))
	}
	return `{"mcpServers": {` + strings.Join(servers, ", ") + `}}`
}

// activationTrips activates user on f, with a token stored for each of
// its n servers, and returns the host round trips the activation took.
func activationTrips(t testing.TB, f *fixture, user string, n int) int64 {
	t.Helper()
	for i := range n {
		f.setSecret(user, extmcp.TokenSecret(fmt.Sprintf("s%d", i)), "tok-"+user)
	}
	before := f.h.RoundTrips()
	f.activate(user)
	trips := f.h.RoundTrips() - before
	if got := len(f.h.UserTools(user)); got < n {
		t.Fatalf("%s has %d tools after activating %d servers", user, got, n)
	}
	return trips
}

// TestActivationRoundTrips counts the host round trips of activating a
// user with N stdio servers, in process and over the gRPC carrier: the
// switches once, each token once, one connect per server carrying its
// spec (no StartService back), one publish: 2N+2 (it was N²+6N+2). A
// refresh with nothing changed reads the switches and tokens and
// publishes: N+2.
func TestActivationRoundTrips(t *testing.T) {
	needBins(t)
	for _, c := range []struct {
		carrier string
		n       int
	}{{"inprocess", 1}, {"inprocess", 10}, {"grpc-fd", 10}} {
		n := c.n
		t.Run(fmt.Sprintf("%s/%d", c.carrier, n), func(t *testing.T) {
			f := newFixture(t, c.carrier, stdioConfig(n), nil)
			trips := activationTrips(t, f, "alice", n)
			t.Logf("activation with %d stdio servers: %d host round trips", n, trips)
			before := f.h.RoundTrips()
			f.activate("alice")
			refresh := f.h.RoundTrips() - before
			t.Logf("refresh with nothing changed: %d host round trips", refresh)
			if want := int64(2*n + 2); trips != want {
				t.Errorf("activating %d stdio servers took %d host round trips, want %d (2N+2)", n, trips, want)
			}
			if want := int64(n + 2); refresh != want {
				t.Errorf("a refresh with nothing changed took %d host round trips, want %d (N+2)", refresh, want)
			}
			// Every server answers, with the user's own token.
			res := f.mustCall("alice", fmt.Sprintf("s%d/whoami", n-1), `{}`)
			if !strings.Contains(res.Text(), "tok-alice") {
				t.Errorf("the server saw %q, want the user's token", res.Text())
			}
		})
	}
}
