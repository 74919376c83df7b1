package main

import (
	"testing"
	"time"
)

// TestParseExpiry: --expires takes a duration from now or an RFC 3339
// time in the future; anything else is a usage error.
func TestParseExpiry(t *testing.T) {
	now := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"30m":                  now.Add(30 * time.Minute),
		"2h":                   now.Add(2 * time.Hour),
		"2026-12-31T18:00:00Z": time.Date(2026, 12, 31, 18, 0, 0, 0, time.UTC),
	} {
		if got, err := parseExpiry(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseExpiry(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0s", "-5m", "2020-01-01T00:00:00Z", "tomorrow", ""} {
		if _, err := parseExpiry(in, now); err == nil {
			t.Errorf("parseExpiry(%q) accepted", in)
		}
	}
}
