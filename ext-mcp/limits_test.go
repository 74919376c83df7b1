package extmcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/buger/jsonparser"
)

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 bytes", 1023: "1023 bytes", 1024: "1 KiB", 65536: "64 KiB", 100_000: "97.7 KiB",
		4 << 20: "4 MiB", 15_000_000: "14.3 MiB", 16_000_000: "15.3 MiB", 1 << 30: "1 GiB", 3 << 40: "3072 GiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	// Sizes that round to the limit are written exactly.
	e := &tooLargeError{server: "s", limit: 4 << 20, size: 4<<20 + 1}
	if got := e.Error(); !strings.Contains(got, "4194305 bytes, over the 4194304 bytes limit") {
		t.Errorf("%q", got)
	}
}

func TestNumericHost(t *testing.T) {
	for host, want := range map[string]bool{
		"0x7f000001": true, "2130706433": true, "017700000001": true, "127.1": true, "0x7f.0.0.1": true, "10.0.0.1.": true,
		"example.com": false, "0xfoo.example": false, "mcp1.example": false, "localhost": false, "x.0xg": false,
	} {
		if got := numericHost(host); got != want {
			t.Errorf("numericHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestEnvelopeOf finds the id of a message over the limit at its head or,
// when the result comes first, at its tail.
func TestEnvelopeOf(t *testing.T) {
	big := strings.Repeat("x", 200_000)
	for name, tc := range map[string]struct {
		msg    string
		id     string
		idType jsonparser.ValueType
		method string
	}{
		"id first":      {`{"jsonrpc":"2.0","id":"ah-7","result":{"text":"` + big + `"}}`, "ah-7", jsonparser.String, ""},
		"id last":       {`{"jsonrpc":"2.0","result":{"text":"` + big + `"},"id":42}`, "42", jsonparser.Number, ""},
		"jsonrpc last":  {`{"result":{"text":"` + big + `"},"id":"ah-1","jsonrpc":"2.0"}`, "ah-1", jsonparser.String, ""},
		"nested id":     {`{"result":{"text":"` + big + `","data":{"id":9}},"id":"ah-2"}`, "ah-2", jsonparser.String, ""},
		"request":       {`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"x":"` + big + `"}}`, "s1", jsonparser.String, "sampling/createMessage"},
		"notification":  {`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + big + `"}}`, "", jsonparser.NotExist, "notifications/message"},
		"escaped quote": {`{"result":{"text":"` + big + `\",\"id\":\"ah-9\"}"}}`, "", jsonparser.NotExist, ""},
	} {
		t.Run(name, func(t *testing.T) {
			r := newMsgReader(strings.NewReader(tc.msg+"\n"+`{"id":1}`+"\n"), 1024)
			_, o, err := r.next()
			if err != nil || o == nil {
				t.Fatalf("next: %v %v; want a message over the limit", o, err)
			}
			if o.size != int64(len(tc.msg)+1) || o.endless {
				t.Errorf("size %d endless %v; want %d", o.size, o.endless, len(tc.msg)+1)
			}
			id, idType, method := o.envelopeOf()
			if string(id) != tc.id || (tc.id != "" && idType != tc.idType) || string(method) != tc.method {
				t.Errorf("envelope: id %q (%v) method %q; want %q (%v) %q", id, idType, method, tc.id, tc.idType, tc.method)
			}
			if line, _, err := r.next(); err != nil || string(line) != `{"id":1}`+"\n" {
				t.Errorf("the next line: %q %v", line, err)
			}
		})
	}
}

// FuzzMsgReader reads any bytes with a small limit (SECURITY.md G2): no
// panic, no line longer than the limit, every byte accounted for, in
// bounded memory, and the reader ends.
func FuzzMsgReader(f *testing.F) {
	for _, seed := range []string{"", "\n", "{}\n{}", strings.Repeat("a", 300) + "\nb\n", "x\r\n\x00\n", strings.Repeat("\n", 10),
		`{"id":"ah-1","result":` + strings.Repeat("1", 500) + "}\n"} {
		f.Add([]byte(seed), uint16(64))
	}
	f.Fuzz(func(t *testing.T, in []byte, limit uint16) {
		lim := int64(limit%512) + 1
		r := newMsgReader(bytes.NewReader(in), lim)
		r.drain = 4 * lim // small, to reach the endless case
		var seen int64
		for i := 0; ; i++ {
			if i > len(in)+1 {
				t.Fatal("the reader does not end")
			}
			line, big, err := r.next()
			switch {
			case errors.Is(err, io.EOF):
				if seen != int64(len(in)) {
					t.Fatalf("read %d of %d bytes", seen, len(in))
				}
				return
			case err != nil:
				t.Fatal(err)
			case big != nil:
				if big.size <= lim || len(big.head) > headKeep || len(big.tail) > tailKeep {
					t.Fatalf("oversized %d (limit %d), head %d, tail %d", big.size, lim, len(big.head), len(big.tail))
				}
				big.envelopeOf()
				seen += big.size
				if big.endless {
					return
				}
			default:
				if int64(len(line)) > lim {
					t.Fatalf("a line of %d bytes passed a limit of %d", len(line), lim)
				}
				seen += int64(len(line))
			}
		}
	})
}

// TestErrorAnswerKeepsID: the error answer to a message over the limit
// carries the id exactly as the server wrote it, escapes included, and is
// valid JSON whatever the id's bytes.
func TestErrorAnswerKeepsID(t *testing.T) {
	for _, raw := range []string{`s1`, `a\"b`, `tab\there`, `\u00e9\\`, "caf\u00e9"} {
		msg := `{"jsonrpc":"2.0","id":"` + raw + `","method":"x","params":{"big":"` + strings.Repeat("x", 2048) + `"}}`
		o := &oversized{head: []byte(msg[:200])}
		id, idType, _ := o.envelopeOf()
		b := errorAnswer(id, idType, -32600, "too large")
		var got, want struct{ ID any }
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("id %s: the answer %s is not JSON: %v", raw, b, err)
			continue
		}
		_ = json.Unmarshal([]byte(`{"id":"`+raw+`"}`), &want)
		if got.ID != want.ID {
			t.Errorf("id %s: the answer carries id %q, want %q", raw, got.ID, want.ID)
		}
	}
}
