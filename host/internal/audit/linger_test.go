package audit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/internal/audit"
)

// countingStore is the real SQLite store, counting its transactions.
type countingStore struct {
	*audit.SQLite
	appends atomic.Int64
}

func (c *countingStore) Append(ctx context.Context, recs []audit.Record) error {
	c.appends.Add(1)
	return c.SQLite.Append(ctx, recs)
}

// TestWriterLingers: records that come one at a time, a little apart,
// share one transaction within the linger (at one call at a time, a
// transaction each cost a call more than the record); Close writes what
// lingers at once.
func TestWriterLingers(t *testing.T) {
	st := &countingStore{SQLite: open(t)}
	w := audit.NewWriter(st, &audit.WriterOptions{Linger: time.Hour})
	for range 5 {
		w.Add(audit.Record{Kind: audit.KindTool, User: "alice", Tool: "s/t", Outcome: audit.OutcomeOK})
		time.Sleep(5 * time.Millisecond) // the writer would have written it alone by now
	}
	w.Close()
	if n, s := st.appends.Load(), w.Stats(); n != 1 || s.Written != 5 {
		t.Errorf("%d transactions for 5 records (stats %+v), want 1", n, s)
	}
}
