package extmcp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/buger/jsonparser"
)

// Size caps on what a server sends (SECURITY.md C15, G2). Every message
// from a server is bounded by its limit (the server's maxResultBytes, else
// the config's, else [DefaultMaxResultBytes]), enforced where the bytes
// arrive, before anything larger is buffered:
//
//   - stdio (the line reader) and ext-mcp's own requests over Streamable
//     HTTP: a message over the limit is not kept; its first and last bytes
//     are, to tell which request it answers, and the rest is discarded up
//     to its end. That request fails with a [tooLargeError] (a tool call:
//     an error result naming the limit and the server); the connection
//     stays usable. A message that goes on past drainLimit (a server
//     writing an endless line) closes the connection instead, which the
//     catalog then retries like any connection that ended.
//   - what go-sdk reads over HTTP (lists, legacy SSE, stateless servers):
//     SSE events are bounded by go-sdk's MaxEventSize and JSON bodies by
//     [capBodies]; go-sdk ends a connection on either, so it is closed and
//     reconnected.

// tooLargeError is a server's message over its limit.
type tooLargeError struct {
	server  string
	limit   int64
	size    int64 // bytes seen; 0 when unknown
	atLeast bool  // the message went on beyond size
}

func (e *tooLargeError) Error() string {
	size, limit := formatBytes(e.size), formatBytes(e.limit)
	if size == limit {
		size, limit = strconv.FormatInt(e.size, 10)+" bytes", strconv.FormatInt(e.limit, 10)+" bytes"
	}
	switch {
	case e.size == 0:
		return fmt.Sprintf("MCP server %q returned a result over the %s limit (maxResultBytes)", e.server, limit)
	case e.atLeast:
		return fmt.Sprintf("MCP server %q returned a result of more than %s, over the %s limit (maxResultBytes)", e.server, size, limit)
	}
	return fmt.Sprintf("MCP server %q returned a result of %s, over the %s limit (maxResultBytes)", e.server, size, limit)
}

// overLimit recognises go-sdk's words for a message over the limit it was
// given (MaxEventSize; its errors do not wrap a sentinel) and the capped
// body's error where go-sdk flattened it, and sets *big.
func (c *conn) overLimit(err error, big **tooLargeError) bool {
	msg := err.Error()
	if !strings.Contains(msg, "event exceeded") && !strings.Contains(msg, "(maxResultBytes)") {
		return false
	}
	*big = &tooLargeError{server: c.server, limit: c.limit}
	return true
}

// formatBytes writes n in the largest binary unit it reaches, with one
// decimal when it is not whole: "4 MiB", "15.2 MiB", "512 bytes".
func formatBytes(n int64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + units[i]
}

// drainLimit is how far a message over limit is read (and discarded)
// looking for its end before the connection is given up.
func drainLimit(limit int64) int64 { return max(64<<20, 4*limit) }

// How much of a message over the limit is kept to find its id.
const (
	headKeep = 64 << 10
	tailKeep = 4 << 10
)

// msgReader reads newline-delimited messages of at most limit bytes from
// a buffered reader. It is not safe for concurrent use.
type msgReader struct {
	r     *bufio.Reader
	limit int64
	drain int64
}

func newMsgReader(r io.Reader, limit int64) *msgReader {
	return &msgReader{r: bufio.NewReaderSize(r, 64<<10), limit: limit, drain: drainLimit(limit)}
}

// oversized is a message over the limit, as far as it was read.
type oversized struct {
	size    int64 // bytes read, the newline included
	endless bool  // drain was reached before its end
	head    []byte
	tail    []byte
}

// next returns the next line (a copy, with its newline), or the message
// over the limit it skipped, or the reader's error. A last line without a
// newline is a line; io.EOF comes after it.
func (m *msgReader) next() (line []byte, big *oversized, err error) {
	var buf []byte
	for {
		chunk, err := m.r.ReadSlice('\n')
		if int64(len(buf)+len(chunk)) > m.limit {
			return nil, m.skip(buf, chunk, err), nil
		}
		switch {
		case err == nil && buf == nil:
			// The common case: the whole line in the buffer. Copy it, the
			// reader reuses its buffer.
			return bytes.Clone(chunk), nil, nil
		case err == nil:
			return append(buf, chunk...), nil, nil
		case errors.Is(err, bufio.ErrBufferFull):
			buf = append(buf, chunk...)
		default:
			if len(buf)+len(chunk) > 0 && errors.Is(err, io.EOF) {
				return append(buf, chunk...), nil, nil // a last line without newline
			}
			return nil, nil, err
		}
	}
}

// skip discards the rest of a message over the limit, keeping its head
// and tail. buf and chunk are what was read of it; err is chunk's error.
func (m *msgReader) skip(buf, chunk []byte, err error) *oversized {
	o := &oversized{size: int64(len(buf) + len(chunk))}
	o.head = bytes.Clone(buf[:min(len(buf), headKeep)])
	if len(o.head) < headKeep {
		o.head = append(o.head, chunk[:min(len(chunk), headKeep-len(o.head))]...)
	}
	o.tail = keepTail(nil, buf)
	o.tail = keepTail(o.tail, chunk)
	for errors.Is(err, bufio.ErrBufferFull) {
		if o.size >= m.drain {
			o.endless = true
			return o
		}
		chunk, err = m.r.ReadSlice('\n')
		o.size += int64(len(chunk))
		o.tail = keepTail(o.tail, chunk)
	}
	return o // at its newline, or at the reader's error (the next read sees it again)
}

// keepTail appends b to tail, keeping the last tailKeep bytes.
func keepTail(tail, b []byte) []byte {
	if len(b) >= tailKeep {
		return append(tail[:0], b[len(b)-tailKeep:]...)
	}
	tail = append(tail, b...)
	if n := len(tail) - tailKeep; n > 0 {
		tail = append(tail[:0], tail[n:]...)
	}
	return tail
}

// tailMember finds a top-level "id" or "method" at the end of a message
// whose start is lost: after a huge result, they are the last members.
var tailMember = regexp.MustCompile(`"(id|method)"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*)\s*[,}]`)

// envelopeOf returns what the head and tail of a message over the limit
// say of its top level: its id (raw, with its type) and method. JSON
// encoders mostly write id first, so the head tells; else the last members
// of the tail. A server can only mislead this about its own messages.
func (o *oversized) envelopeOf() (id []byte, idType jsonparser.ValueType, method []byte) {
	// The head is cut short: ObjectEach reports the members it finished
	// before failing on the cut one.
	_ = jsonparser.ObjectEach(o.head, func(k, v []byte, t jsonparser.ValueType, _ int) error {
		switch string(k) {
		case "id":
			id, idType = v, t
		case "method":
			method = v
		}
		return nil
	})
	if id != nil {
		return id, idType, method
	}
	for _, m := range tailMember.FindAllSubmatch(o.tail, -1) {
		v, t := m[2], jsonparser.Number
		if v[0] == '"' {
			v, t = v[1:len(v)-1], jsonparser.String
		}
		if string(m[1]) == "id" {
			id, idType = v, t
		} else {
			method = v
		}
	}
	return id, idType, method
}

// capBodies wraps an HTTP transport so that a response body that is not
// an event stream (a JSON answer) holds at most limit bytes: reading past
// them returns a [tooLargeError], after the rest (up to drainLimit) was
// read and discarded to measure it, so the connection can be reused.
// go-sdk reads JSON answers whole otherwise.
func capBodies(base http.RoundTripper, server string, limit int64) http.RoundTripper {
	return &capTransport{base: base, server: server, limit: limit}
}

type capTransport struct {
	base   http.RoundTripper
	server string
	limit  int64
}

func (t *capTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
		resp.Body = &capBody{ReadCloser: resp.Body, t: t, length: resp.ContentLength}
	}
	return resp, nil
}

type capBody struct {
	io.ReadCloser
	t      *capTransport
	length int64 // Content-Length, -1 when unknown
	n      int64
	err    error
}

func (b *capBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.length > b.t.limit {
		// Known too long: not a byte of it is read.
		b.err = &tooLargeError{server: b.t.server, limit: b.t.limit, size: b.length}
		return 0, b.err
	}
	if room := b.t.limit + 1 - b.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if b.n > b.t.limit {
		drained, _ := io.Copy(io.Discard, io.LimitReader(b.ReadCloser, drainLimit(b.t.limit)-b.n))
		size := b.n + drained
		b.err = &tooLargeError{server: b.t.server, limit: b.t.limit, size: size, atLeast: size >= drainLimit(b.t.limit)}
		return 0, b.err
	}
	return n, err
}
