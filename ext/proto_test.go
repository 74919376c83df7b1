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

// pinnedPlugins builds the protoc plugins pinned by the tool directive in
// ../tools/go.mod into a temporary folder and returns it, so the check never
// depends on whatever versions happen to be installed.
func pinnedPlugins(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator),
		"google.golang.org/protobuf/cmd/protoc-gen-go", "google.golang.org/grpc/cmd/protoc-gen-go-grpc")
	build.Dir = filepath.Join("..", "tools")
	build.Env = append(os.Environ(), "GOWORK=off")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the pinned protoc plugins in ../tools: %v\n%s", err, b)
	}
	return dir
}

// versionLine matches the generator version comments, which may differ
// between machines without changing the code.
var versionLine = regexp.MustCompile(`(?m)^//\s+(protoc|protoc-gen-go|protoc-gen-go-grpc)\s+v.*$`)

// TestGeneratedCodeIsFresh regenerates the wire code and fails when the
// committed copy is stale: run `make proto` after editing ext/proto.
func TestGeneratedCodeIsFresh(t *testing.T) {
	requireTool(t, "protoc", "apt-get install protobuf-compiler")
	out := t.TempDir()
	gen := exec.Command("./gen.sh", out)
	gen.Env = append(os.Environ(), "PATH="+pinnedPlugins(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if b, err := gen.CombinedOutput(); err != nil {
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
