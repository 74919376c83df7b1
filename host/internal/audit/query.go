package audit

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// Query encodes f as the query of GET /v1/audit (and of the
// operator's and users' JSON APIs).
func Query(f Filter) url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("user", f.User)
	set("server", f.Server)
	set("tool", f.Tool)
	set("outcome", f.Outcome)
	set("kind", f.Kind)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.Format(time.RFC3339Nano))
	}
	if f.AfterID > 0 {
		q.Set("after", strconv.FormatInt(f.AfterID, 10))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// ParseFilter decodes [Query]'s query; since is RFC 3339 or a
// duration back from now (1h).
func ParseFilter(q url.Values) (Filter, error) {
	f := Filter{User: q.Get("user"), Server: q.Get("server"), Tool: q.Get("tool"), Outcome: q.Get("outcome"), Kind: q.Get("kind")}
	if s := q.Get("since"); s != "" {
		t, err := ParseSince(s, time.Now())
		if err != nil {
			return f, err
		}
		f.Since = t
	}
	for _, p := range []struct {
		k string
		v *int64
	}{{"after", &f.AfterID}} {
		if s := q.Get(p.k); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return f, fmt.Errorf("%s %q is not a record ID: %w", p.k, s, ext.ErrInvalidArgument)
			}
			*p.v = n
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 100000 {
			return f, fmt.Errorf("limit %q is not 0-100000: %w", s, ext.ErrInvalidArgument)
		}
		f.Limit = n
	}
	return f, nil
}

// ParseSince reads a time (RFC 3339) or a duration back from now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("since %q is neither a duration (1h) nor a time (RFC 3339): %w", s, ext.ErrInvalidArgument)
	}
	return t, nil
}
