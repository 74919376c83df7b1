package ext_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// requireTool skips when a tool is missing on a laptop, and fails in CI,
// where nothing named may silently skip.
func requireTool(t *testing.T, name, hint string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing in CI: %s", name, hint)
		}
		t.Skipf("SKIPPING: %s not found (%s); CI runs this test", name, hint)
	}
}

// versionLine matches the generator version comments, which may differ
// between machines without changing the code.
var versionLine = regexp.MustCompile(`(?m)^//\s+(protoc|protoc-gen-go|protoc-gen-go-grpc)\s+v.*$`)

// TestGeneratedCodeIsFresh regenerates the wire code and fails when the
// committed copy is stale: run `make proto` after editing ext/proto.
func TestGeneratedCodeIsFresh(t *testing.T) {
	requireTool(t, "protoc", "apt-get install protobuf-compiler")
	requireTool(t, "protoc-gen-go", "make tools")
	requireTool(t, "protoc-gen-go-grpc", "make tools")
	out := t.TempDir()
	if b, err := exec.Command("./gen.sh", out).CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, b)
	}
	for _, name := range []string{"ext.pb.go", "ext_grpc.pb.go"} {
		fresh, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(filepath.Join("internal", "extpb", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(versionLine.ReplaceAll(fresh, nil), versionLine.ReplaceAll(committed, nil)) {
			t.Errorf("internal/extpb/%s is stale: run `make proto` and commit the result", name)
		}
	}
}

// TestProtocolVersionMatchesProto ties ext.ProtocolVersion to the proto
// package name (agenthost.ext.vN).
func TestProtocolVersionMatchesProto(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("proto", "agenthost", "ext", "v1", "ext.proto"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^package agenthost\.ext\.v(\d+);`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no package line in ext.proto")
	}
	if got := string(m[1]); got != strconv.Itoa(ext.ProtocolVersion) {
		t.Errorf("ext.ProtocolVersion = %d but the proto package is v%s", ext.ProtocolVersion, got)
	}
	if ext.Handshake.ProtocolVersion != ext.ProtocolVersion {
		t.Errorf("handshake protocol %d != ProtocolVersion %d", ext.Handshake.ProtocolVersion, ext.ProtocolVersion)
	}
}
