package host

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"sync"

	"github.com/agenthost/agenthost/ext"
)

// toolWatch tells one extension with the "usertools" capability each
// active user's tools ([ext.UserToolsWatcher]). mu orders the calls of
// one user (the watcher goroutine's and an activation's) and guards sent.
type toolWatch struct {
	e    *extension
	mu   sync.Mutex
	sent map[string][32]byte // user → the hash of the list last told
}

// startToolWatchers starts, for each extension with the "usertools"
// capability, the goroutine that tells it each active user's tools when
// they change. The host owns them (h.bg) and ends them at Close (h.life).
func (h *Host) startToolWatchers() {
	for _, e := range sortedExtensions(h.exts) {
		if !e.descriptor().Has(ext.CapabilityUserTools) {
			continue
		}
		w := &toolWatch{e: e, sent: map[string][32]byte{}}
		h.toolWatches = append(h.toolWatches, w)
		events, unsub := h.reg.subscribe("")
		h.bg.Add(1)
		go func() {
			defer h.bg.Done()
			defer unsub()
			h.watchUserTools(w, events)
		}()
	}
}

// tellActivated tells every watcher the tools of user, just activated,
// before the activation ends: the tools the watchers offer on them are
// there at the user's first list.
func (h *Host) tellActivated(ctx context.Context, user string) {
	for _, w := range h.toolWatches {
		h.tellUserTools(ctx, w, user)
	}
}

// watchUserTools tells w's extension each active user's tools whenever
// they change, and forgets the users no longer active.
func (h *Host) watchUserTools(w *toolWatch, events <-chan struct{}) {
	for {
		select {
		case <-h.life.Done():
			return
		case <-events:
		}
		active := map[string]bool{}
		for _, user := range h.ActiveUsers() {
			active[user] = true
			h.tellUserTools(h.life, w, user)
		}
		w.mu.Lock()
		for user := range w.sent {
			if !active[user] {
				delete(w.sent, user) // told again at the next activation
			}
		}
		w.mu.Unlock()
	}
}

// tellUserTools tells w's extension user's tools (but its own) when they
// differ from what it was last told.
func (h *Host) tellUserTools(ctx context.Context, w *toolWatch, user string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var tools []ext.Tool
	for _, t := range h.reg.list(user) {
		if t.Extension != w.e.name {
			tools = append(tools, t.Tool)
		}
	}
	b, _ := json.Marshal(tools)
	sum := sha256.Sum256(b)
	if prev, ok := w.sent[user]; ok && prev == sum {
		return
	}
	err := useFor(ctx, w.e, user, ext.CapabilityUserTools, func() string { return "telling user " + user + "'s tools" },
		func(uw ext.UserToolsWatcher) error { return uw.UserToolsChanged(ctx, user, tools) })
	if err != nil {
		if ctx.Err() == nil {
			w.e.logger.Warn("telling a user's tools failed", "user", user, "error", err)
		}
		return
	}
	w.sent[user] = sum
}
