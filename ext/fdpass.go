//go:build unix

package ext

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
)

// The descriptor channel: one end of a socketpair the host hands the
// extension at launch as an extra file (never a path another process could
// open). The host sends a service's stdin and stdout over it with
// SCM_RIGHTS, tagged with a one-time token that the gRPC stream names, so
// the bytes flow straight between the extension and the process.

// EnvFDChannel names the environment variable that tells an extension
// process which descriptor holds the descriptor channel.
const EnvFDChannel = "AGENTHOST_FD_CHANNEL"

// NewFDChannel returns a connected pair for the descriptor channel: the
// host keeps hostEnd (pass it in [ClientOptions]) and hands extEnd to the
// extension process as an extra file, naming its descriptor number in
// [EnvFDChannel]. The caller closes extEnd once the process has started.
func NewFDChannel() (hostEnd, extEnd *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the descriptor channel: %w", err)
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return os.NewFile(uintptr(fds[0]), "agenthost-fd-host"), os.NewFile(uintptr(fds[1]), "agenthost-fd-ext"), nil
}

// NewCallChannel returns a connected stream socketpair for the call
// channel: the host keeps hostEnd (pass it in [ClientOptions]) and hands
// extEnd to the extension process as an extra file, naming its descriptor
// number in [EnvCallChannel]. The caller closes extEnd once the process has
// started.
func NewCallChannel() (hostEnd, extEnd *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the call channel: %w", err)
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return os.NewFile(uintptr(fds[0]), "agenthost-call-host"), os.NewFile(uintptr(fds[1]), "agenthost-call-ext"), nil
}

// fdSender sends descriptors on the host side.
type fdSender struct {
	mu   sync.Mutex
	conn *net.UnixConn
}

func newFDSender(f *os.File) (*fdSender, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("opening the descriptor channel: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("descriptor channel is not a unix socket")
	}
	return &fdSender{conn: uc}, nil
}

func (s *fdSender) send(stdin, stdout *os.File) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b[:])
	// Reach the descriptors through SyscallConn: f.Fd() would switch the
	// shared file descriptions to blocking mode.
	inRC, err := stdin.SyscallConn()
	if err != nil {
		return "", err
	}
	outRC, err := stdout.SyscallConn()
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var werr error
	cerr := inRC.Control(func(in uintptr) {
		cerr := outRC.Control(func(out uintptr) {
			_, _, werr = s.conn.WriteMsgUnix([]byte(token), syscall.UnixRights(int(in), int(out)), nil)
		})
		if werr == nil {
			werr = cerr
		}
	})
	if err := errors.Join(cerr, werr); err != nil {
		return "", err
	}
	return token, nil
}

func (s *fdSender) close() error { return s.conn.Close() }

// fdReceiver receives descriptors in the extension process. One goroutine
// reads the channel for the life of the process; waiters pick their pair by
// token.
type fdReceiver struct {
	conn *net.UnixConn

	mu      sync.Mutex
	got     map[string][2]*os.File
	waiters map[string]chan struct{}
	err     error
	done    chan struct{}
}

func newFDReceiver(f *os.File) (*fdReceiver, error) {
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("opening the descriptor channel: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("descriptor channel is not a unix socket")
	}
	r := &fdReceiver{
		conn: uc, got: map[string][2]*os.File{}, waiters: map[string]chan struct{}{}, done: make(chan struct{}),
	}
	go r.loop()
	return r, nil
}

func (r *fdReceiver) loop() {
	defer close(r.done)
	buf := make([]byte, 64)
	oob := make([]byte, syscall.CmsgSpace(2*4))
	for {
		n, oobn, _, _, err := r.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			r.mu.Lock()
			r.err = fmt.Errorf("descriptor channel closed: %w", err)
			for _, w := range r.waiters {
				close(w)
			}
			r.waiters = map[string]chan struct{}{}
			r.mu.Unlock()
			return
		}
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			continue
		}
		fds, err := syscall.ParseUnixRights(&msgs[0])
		if err != nil {
			continue
		}
		if len(fds) != 2 {
			for _, fd := range fds {
				_ = syscall.Close(fd)
			}
			continue
		}
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
		token := string(buf[:n])
		pair := [2]*os.File{os.NewFile(uintptr(fds[0]), "service-stdin"), os.NewFile(uintptr(fds[1]), "service-stdout")}
		r.mu.Lock()
		r.got[token] = pair
		if w, ok := r.waiters[token]; ok {
			close(w)
			delete(r.waiters, token)
		}
		r.mu.Unlock()
	}
}

func (r *fdReceiver) receive(ctx context.Context, token string) (stdin, stdout *os.File, err error) {
	r.mu.Lock()
	if p, ok := r.got[token]; ok {
		delete(r.got, token)
		r.mu.Unlock()
		return p[0], p[1], nil
	}
	if r.err != nil {
		r.mu.Unlock()
		return nil, nil, r.err
	}
	w := make(chan struct{})
	r.waiters[token] = w
	r.mu.Unlock()
	select {
	case <-w:
	case <-ctx.Done():
		r.mu.Lock()
		delete(r.waiters, token)
		p, ok := r.got[token]
		delete(r.got, token)
		r.mu.Unlock()
		if ok {
			_ = p[0].Close()
			_ = p[1].Close()
		}
		return nil, nil, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.got[token]
	if !ok {
		if r.err != nil {
			return nil, nil, r.err
		}
		return nil, nil, fmt.Errorf("descriptor pair %q never arrived", token)
	}
	delete(r.got, token)
	return p[0], p[1], nil
}

func (r *fdReceiver) close() {
	_ = r.conn.Close()
	<-r.done
}
