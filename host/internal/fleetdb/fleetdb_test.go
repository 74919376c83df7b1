package fleetdb_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/fleetdb"
)

// TestKeptAcrossReopen: what is put is read back after the file is
// closed and opened again; Put of nothing and Delete forget a user; a
// row that does not decode is named and the others are still read.
func TestKeptAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "data", fleetdb.FileName)
	st, err := fleetdb.OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	alice := []api.FleetEntry{{StatusEntry: api.StatusEntry{User: "alice", Extension: "mcp", Name: "gh", State: "quarantined", Reason: "crashed 5 times"}, Seen: seen}}
	bob := []api.FleetEntry{{StatusEntry: api.StatusEntry{User: "bob", Extension: "mcp", Name: "jira", State: "needs sign-in"}, Seen: seen}}
	carol := []api.FleetEntry{{StatusEntry: api.StatusEntry{User: "carol", Extension: "mcp", Name: "x", State: "error"}, Seen: seen}}
	for user, e := range map[string][]api.FleetEntry{"alice": alice, "bob": bob, "carol": carol} {
		if err := st.Put(ctx, user, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Put(ctx, "carol", nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "alice", alice); !errors.Is(err, fleetdb.ErrClosed) {
		t.Errorf("Put on a closed store: %v", err)
	}
	st, err = fleetdb.OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.All(ctx)
	if err != nil || !reflect.DeepEqual(got, map[string][]api.FleetEntry{"alice": alice, "bob": bob}) {
		t.Fatalf("after a reopen: %+v %v", got, err)
	}
	if err := st.Delete(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.All(ctx); len(got) != 1 || got["alice"] == nil {
		t.Errorf("after deleting bob: %+v", got)
	}
	if err := st.PutRaw(ctx, "dave", "{not json"); err != nil {
		t.Fatal(err)
	}
	got, err = st.All(ctx)
	if err == nil || !strings.Contains(err.Error(), `user "dave"`) || len(got) != 1 || got["alice"] == nil {
		t.Errorf("with a row that does not decode: %+v %v, want alice's and an error naming dave", got, err)
	}
}
