package codemode

import (
	"errors"

	"github.com/agenthost/agenthost/ext"
)

// refusedErr reports whether an inner call's error means the call was
// never made (arguments, scope, policy), as opposed to failing on the way.
func refusedErr(err error) bool {
	return errors.Is(err, ext.ErrInvalidArgument) || errors.Is(err, ext.ErrNotFound) || errors.Is(err, ext.ErrPermission)
}
