package audit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Retention bounds the log: records older than Days, and the oldest
// beyond Rows, are deleted every Every.
type Retention struct {
	Days  float64       // default 90
	Rows  int64         // default 1,000,000
	Every time.Duration // default 1 h
}

// WriterOptions configures [NewWriter]; zero fields take the defaults.
type WriterOptions struct {
	Queue int // records waiting at most (default 8192); beyond, dropped and counted
	Batch int // records per transaction at most (default 512)
	// Linger is how long the writer waits after a record for others to
	// write with it in one transaction (default 10 ms; negative: none):
	// at one call at a time, a transaction per record costs the calls
	// more CPU than the records themselves.
	Linger    time.Duration
	Retention Retention
	Logger    *slog.Logger
	Now       func() time.Time
}

// Stats are a Writer's counters.
type Stats struct {
	Written int64 `json:"written"`
	Dropped int64 `json:"dropped"`
	Failed  int64 `json:"failed"` // lost to a failed write
	Queued  int   `json:"queued"`
	Swept   int64 `json:"swept"`
}

// Writer queues records and writes them to a Store in batches from one
// goroutine, which it owns and Close joins (see the package doc for the
// durability rule).
type Writer struct {
	st     Store
	q      chan Record
	batch  int
	linger time.Duration
	// backlog: the last gather filled a batch (the run goroutine's own).
	backlog bool
	ret     Retention
	log     *slog.Logger
	now     func() time.Time
	sweepc  chan chan struct{}

	accepted, written, dropped, failed, swept atomic.Int64

	mu     sync.RWMutex // guards closed against Add's send
	closed bool
	done   chan struct{}
	stop   chan struct{}
}

// NewWriter starts a writer of st.
func NewWriter(st Store, o *WriterOptions) *Writer {
	var opt WriterOptions
	if o != nil {
		opt = *o
	}
	if opt.Queue <= 0 {
		opt.Queue = 8192
	}
	if opt.Batch <= 0 {
		opt.Batch = 512
	}
	if opt.Linger == 0 {
		opt.Linger = 10 * time.Millisecond
	}
	if opt.Retention.Days <= 0 {
		opt.Retention.Days = 90
	}
	if opt.Retention.Rows <= 0 {
		opt.Retention.Rows = 1_000_000
	}
	if opt.Retention.Every <= 0 {
		opt.Retention.Every = time.Hour
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	w := &Writer{st: st, q: make(chan Record, opt.Queue), batch: opt.Batch, linger: opt.Linger, ret: opt.Retention, log: opt.Logger,
		now: opt.Now, sweepc: make(chan chan struct{}), done: make(chan struct{}), stop: make(chan struct{})}
	go w.run()
	return w
}

// Add queues rec without waiting; with the queue full, rec is dropped and
// counted. A zero Time is set to now.
func (w *Writer) Add(rec Record) {
	if rec.Time.IsZero() {
		rec.Time = w.now()
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.dropped.Add(1)
		return
	}
	select {
	case w.q <- rec:
		w.accepted.Add(1)
	default:
		w.dropped.Add(1)
	}
}

// Stats returns the counters.
func (w *Writer) Stats() Stats {
	return Stats{Written: w.written.Load(), Dropped: w.dropped.Load(), Failed: w.failed.Load(), Queued: len(w.q), Swept: w.swept.Load()}
}

// Store returns the store written to (for queries).
func (w *Writer) Store() Store { return w.st }

// Sweep runs the retention now and waits for it (tests, the operator).
func (w *Writer) Sweep(ctx context.Context) {
	ch := make(chan struct{})
	select {
	case w.sweepc <- ch:
	case <-ctx.Done():
		return
	case <-w.done:
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// Flush waits until every record queued before it is written (or ctx
// ends).
func (w *Writer) Flush(ctx context.Context) {
	target := w.accepted.Load()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for w.written.Load()+w.failed.Load() < target {
		select {
		case <-ctx.Done():
			return
		case <-w.done:
			return
		case <-t.C:
		}
	}
}

// Close writes what is queued, stops the goroutine and waits for it. It
// does not close the store.
func (w *Writer) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.done
		return
	}
	w.closed = true
	close(w.stop)
	w.mu.Unlock()
	<-w.done
}

// gather adds to buf the records queued within the linger time, up to a
// batch. It waits without taking records one by one (a wake-up of this
// goroutine per record cost the calls as much as the transaction), then
// takes what is queued; while the queue holds a batch or more (the last
// gather filled one), it does not wait.
func (w *Writer) gather(buf *[]Record) {
	if w.linger > 0 && !w.backlog {
		t := time.NewTimer(w.linger)
		select {
		case <-t.C:
		case <-w.stop:
		}
		t.Stop()
	}
	for len(*buf) < w.batch {
		select {
		case r := <-w.q:
			*buf = append(*buf, r)
		default:
			w.backlog = false
			return
		}
	}
	w.backlog = true
}

func (w *Writer) run() {
	defer close(w.done)
	ctx := context.Background()
	w.sweep(ctx)
	tick := time.NewTicker(w.ret.Every)
	defer tick.Stop()
	buf := make([]Record, 0, w.batch)
	write := func() {
		if len(buf) == 0 {
			return
		}
		if err := w.st.Append(ctx, buf); err != nil {
			w.failed.Add(int64(len(buf)))
			w.log.Error("audit: writing records failed; they are lost", "records", len(buf), "error", err)
		} else {
			w.written.Add(int64(len(buf)))
		}
		buf = buf[:0]
	}
	for {
		select {
		case r := <-w.q:
			buf = append(buf, r)
			w.gather(&buf)
			write()
		case ch := <-w.sweepc:
			w.sweep(ctx)
			close(ch)
		case <-tick.C:
			w.sweep(ctx)
		case <-w.stop:
			for {
				select {
				case r := <-w.q:
					buf = append(buf, r)
					if len(buf) >= w.batch {
						write()
					}
				default:
					write()
					return
				}
			}
		}
	}
}

func (w *Writer) sweep(ctx context.Context) {
	before := w.now().Add(-time.Duration(w.ret.Days * float64(24*time.Hour)))
	n, err := w.st.Sweep(ctx, before, w.ret.Rows)
	if err != nil {
		w.log.Error("audit: retention sweep failed", "error", err)
		return
	}
	w.swept.Add(n)
}
