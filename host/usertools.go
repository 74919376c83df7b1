package host

import (
	"crypto/sha256"
	"encoding/json"

	"github.com/agenthost/agenthost/ext"
)

// startToolWatchers starts, for each extension with the "usertools"
// capability, the goroutine that tells it each active user's tools
// ([ext.UserToolsWatcher]) when they change. The host owns them (h.bg)
// and ends them at Close (h.life).
func (h *Host) startToolWatchers() {
	for _, e := range sortedExtensions(h.exts) {
		if !e.descriptor().Has(ext.CapabilityUserTools) {
			continue
		}
		kick := make(chan struct{}, 1)
		h.toolKicks = append(h.toolKicks, kick)
		events, unsub := h.reg.subscribe("")
		h.bg.Add(1)
		go func() {
			defer h.bg.Done()
			defer unsub()
			h.watchUserTools(e, events, kick)
		}()
	}
}

// kickToolWatchers wakes the watchers (a user was activated: their list
// may be unchanged in the registry, and still new to the watcher).
func (h *Host) kickToolWatchers() {
	for _, k := range h.toolKicks {
		select {
		case k <- struct{}{}:
		default:
		}
	}
}

// watchUserTools sends e each active user's tools (but e's own) whenever
// they differ from what it last sent that user, one user at a time.
func (h *Host) watchUserTools(e *extension, events <-chan struct{}, kick <-chan struct{}) {
	sent := map[string][32]byte{}
	for {
		select {
		case <-h.life.Done():
			return
		case <-events:
		case <-kick:
		}
		active := map[string]bool{}
		for _, user := range h.ActiveUsers() {
			active[user] = true
			var tools []ext.Tool
			for _, t := range h.reg.list(user) {
				if t.Extension != e.name {
					tools = append(tools, t.Tool)
				}
			}
			b, _ := json.Marshal(tools)
			sum := sha256.Sum256(b)
			if prev, ok := sent[user]; ok && prev == sum {
				continue
			}
			err := useFor(h.life, e, user, ext.CapabilityUserTools, func() string { return "telling user " + user + "'s tools" },
				func(w ext.UserToolsWatcher) error { return w.UserToolsChanged(h.life, user, tools) })
			if err != nil {
				if h.life.Err() != nil {
					return
				}
				e.logger.Warn("telling a user's tools failed", "user", user, "error", err)
				continue
			}
			sent[user] = sum
		}
		for user := range sent {
			if !active[user] {
				delete(sent, user) // told again at the next activation
			}
		}
	}
}
