//go:build !unix

package ext

import (
	"context"
	"errors"
	"os"
)

// EnvFDChannel names the environment variable that tells an extension
// process which descriptor holds the descriptor channel.
const EnvFDChannel = "AGENTHOST_FD_CHANNEL"

var errNoFDPassing = errors.New("descriptor passing is not supported on this platform")

// NewFDChannel is not supported on this platform: service bytes travel
// over gRPC instead.
func NewFDChannel() (hostEnd, extEnd *os.File, err error) { return nil, nil, errNoFDPassing }

// NewCallChannel is not supported on this platform: calls travel on a
// gRPC stream instead.
func NewCallChannel() (hostEnd, extEnd *os.File, err error) { return nil, nil, errNoFDPassing }

type fdSender struct{}

func newFDSender(*os.File) (*fdSender, error)                 { return nil, errNoFDPassing }
func (*fdSender) send(stdin, stdout *os.File) (string, error) { return "", errNoFDPassing }
func (*fdSender) close() error                                { return nil }

type fdReceiver struct{}

func newFDReceiver(*os.File) (*fdReceiver, error) { return nil, errNoFDPassing }
func (*fdReceiver) receive(context.Context, string) (stdin, stdout *os.File, err error) {
	return nil, nil, errNoFDPassing
}
func (*fdReceiver) close() {}
