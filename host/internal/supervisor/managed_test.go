package supervisor_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/supervisor"
)

// The test binary doubles as the extension (STYLE.md rule 9).
func TestMain(m *testing.M) {
	if os.Getenv("SUPERVISOR_TEST_EXTENSION") != "" {
		ext.Serve(&tiny{})
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

type tiny struct{}

func (tiny) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "tiny", Version: "v1"}, nil
}
func (tiny) Configure(context.Context, *ext.ConfigureRequest) error { return nil }
func (tiny) Shutdown(context.Context) error                         { return nil }

// launcher launches the test binary as the tiny extension and counts the
// launches.
func launcher(t *testing.T, launches *atomic.Int32) supervisor.LaunchFunc {
	spec := supervisor.Spec{Name: "tiny", Path: os.Args[0], Env: []string{"SUPERVISOR_TEST_EXTENSION=1"},
		Home: t.TempDir(), DisableAutoMTLS: true}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	return func(ctx context.Context) (*supervisor.Generation, error) {
		launches.Add(1)
		inst, err := supervisor.Launch(ctx, spec, logger)
		if err != nil {
			return nil, err
		}
		d, err := inst.Client.Describe(ctx)
		if err != nil {
			inst.Kill()
			return nil, err
		}
		return &supervisor.Generation{Ext: inst.Client, Desc: d, Instance: inst}, nil
	}
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// TestRestartAfterCrash: a process that dies is restarted once, callers
// of Get wait for the new generation, OnRestart runs under the lifetime
// context, and Stop ends that context, joins everything and kills the
// process.
func TestRestartAfterCrash(t *testing.T) {
	var launches, restarted atomic.Int32
	var restartCtx context.Context
	m, err := supervisor.Start(context.Background(), "tiny", launcher(t, &launches), &supervisor.ManagedOptions{
		BackoffMin: 10 * time.Millisecond,
		OnRestart: func(ctx context.Context) {
			restartCtx = ctx
			restarted.Add(1)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	first := m.Info()
	if first.State != supervisor.StateRunning || !alive(first.PID) {
		t.Fatalf("after Start: %+v", first)
	}
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var g *supervisor.Generation
	for {
		if g, err = m.Get(ctx); err != nil {
			t.Fatal(err)
		}
		if g.Instance.PID() != first.PID {
			break
		}
		time.Sleep(10 * time.Millisecond) // the dead one, before the watcher noticed
	}
	if d, err := g.Ext.Describe(ctx); err != nil || d.Name != "tiny" {
		t.Fatalf("the new generation: %v, %v", d, err)
	}
	info := m.Info()
	if info.Restarts != 1 || launches.Load() != 2 || restarted.Load() != 1 || info.State != supervisor.StateRunning {
		t.Errorf("after one crash: %+v, %d launches, %d OnRestart", info, launches.Load(), restarted.Load())
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if restartCtx.Err() == nil {
		t.Error("OnRestart's context outlived Stop")
	}
	if alive(info.PID) {
		t.Errorf("process %d outlived Stop", info.PID)
	}
	if _, err := m.Get(ctx); !errors.Is(err, ext.ErrUnavailable) {
		t.Errorf("Get after Stop: %v, want unavailable", err)
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
}

// TestGetHonoursContext: a caller waiting through a long restart backoff
// gives up when its context ends, and Stop during the backoff returns at
// once, leaving nothing behind.
func TestGetHonoursContext(t *testing.T) {
	var launches atomic.Int32
	m, err := supervisor.Start(context.Background(), "tiny", launcher(t, &launches),
		&supervisor.ManagedOptions{BackoffMin: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pid := m.Info().PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); m.Info().State != supervisor.StateRestarting; {
		if time.Now().After(deadline) {
			t.Fatalf("state %q 10s after the crash, want restarting", m.Info().State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = m.Get(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ext.ErrUnavailable) {
		t.Errorf("Get while restarting: %v, want the deadline, unavailable", err)
	}
	start := time.Now()
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 5*time.Second || launches.Load() != 1 {
		t.Errorf("Stop during the backoff took %v after %d launches", time.Since(start), launches.Load())
	}
}

// TestReplace: a generation on which a call could not be delivered is
// replaced even while its process still runs (its channel died first, or
// go-plugin has not seen the exit yet): Replace kills it and returns the
// restarted generation, exactly one restart.
func TestReplace(t *testing.T) {
	var launches atomic.Int32
	m, err := supervisor.Start(context.Background(), "tiny", launcher(t, &launches), &supervisor.ManagedOptions{BackoffMin: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, err := m.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := old.Instance.PID()
	g, err := m.Replace(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if g == old || g.Instance.PID() == pid {
		t.Fatalf("Replace returned the failed generation (pid %d)", pid)
	}
	if alive(pid) {
		t.Errorf("the replaced process %d still runs", pid)
	}
	// A second Replace of the old one changes nothing: it is not current.
	if g2, err := m.Replace(ctx, old); err != nil || g2 != g {
		t.Errorf("Replace of a stale generation = %v, %v; want the current one", g2, err)
	}
	// The restart is counted just after the new generation is installed.
	for deadline := time.Now().Add(5 * time.Second); m.Info().Restarts == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if info := m.Info(); info.Restarts != 1 || launches.Load() != 2 {
		t.Errorf("after Replace: %+v, %d launches; want one restart", info, launches.Load())
	}
}
