package supervisor

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets go-plugin log into the host's slog logger. Lines an
// extension writes to stderr in hclog's JSON shape arrive here with their
// level and attributes.
type hclogAdapter struct {
	l    *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLog(l *slog.Logger) hclog.Logger { return &hclogAdapter{l: l} }

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	a.log(toSlog(level), msg, args)
}

func (a *hclogAdapter) log(level slog.Level, msg string, args []any) {
	if !a.l.Enabled(context.Background(), level) {
		return
	}
	all := make([]any, 0, len(a.args)+len(args)+2)
	if a.name != "" {
		all = append(all, "logger", a.name)
	}
	all = append(all, a.args...)
	all = append(all, args...)
	a.l.Log(context.Background(), level, msg, all...)
}

func toSlog(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.log(slog.LevelDebug-4, msg, args) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.log(slog.LevelDebug, msg, args) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.log(slog.LevelInfo, msg, args) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.log(slog.LevelWarn, msg, args) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.log(slog.LevelError, msg, args) }

func (a *hclogAdapter) IsTrace() bool { return a.l.Enabled(context.Background(), slog.LevelDebug-4) }
func (a *hclogAdapter) IsDebug() bool { return a.l.Enabled(context.Background(), slog.LevelDebug) }
func (a *hclogAdapter) IsInfo() bool  { return a.l.Enabled(context.Background(), slog.LevelInfo) }
func (a *hclogAdapter) IsWarn() bool  { return a.l.Enabled(context.Background(), slog.LevelWarn) }
func (a *hclogAdapter) IsError() bool { return a.l.Enabled(context.Background(), slog.LevelError) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.args }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{l: a.l, name: a.name, args: append(append([]any(nil), a.args...), args...)}
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	n := name
	if a.name != "" {
		n = a.name + "." + name
	}
	return &hclogAdapter{l: a.l, name: n, args: a.args}
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: a.l, name: name, args: a.args}
}

func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	switch {
	case a.IsDebug():
		return hclog.Debug
	case a.IsInfo():
		return hclog.Info
	case a.IsWarn():
		return hclog.Warn
	}
	return hclog.Error
}

func (a *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(nil), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		a.Info(strings.TrimRight(string(p), "\n"))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
