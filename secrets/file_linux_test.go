package secrets_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/secrets"
)

// TestFileLockHonoursContext: a writer waiting for another process's lock
// gives up when its context ends, and reads need no lock.
func TestFileLockHonoursContext(t *testing.T) {
	t.Parallel()
	path, _ := newFileStore(t)
	f := reopen(t, path)
	lock, err := os.OpenFile(path+".lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := f.Set(ctx, fileKey, secrets.NewValue("v")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Set while another process holds the lock: %v; want context.DeadlineExceeded", err)
	}
	if _, err := f.Get(t.Context(), fileKey); err != nil {
		t.Fatalf("Get while another process holds the lock: %v", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(t.Context(), fileKey, secrets.NewValue("v")); err != nil {
		t.Fatalf("Set after the lock was released: %v", err)
	}
}
