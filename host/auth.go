package host

import (
	"context"
	"fmt"

	"github.com/agenthost/agenthost/ext"
)

// BeginAuth asks extension extName (which must list the auth capability)
// to start signing req.User — a user, or [OperatorUser] for the
// operator's credential of a shared resource — in to resource req.Name
// (see [ext.Authorizer]). The surfaces that carry the browser's redirect
// back (package serve) fill in the redirect and metadata URLs; most
// callers start sign-ins through them.
func (h *Host) BeginAuth(ctx context.Context, extName string, req *ext.BeginAuthRequest) (*ext.BeginAuthResult, error) {
	e, err := h.authExtension(extName, req.User)
	if err != nil {
		return nil, err
	}
	var res *ext.BeginAuthResult
	err = use(ctx, e, ext.CapabilityAuth, func() string { return fmt.Sprintf("starting a sign-in of %s to %q", req.User, req.Name) },
		func(a ext.Authorizer) (err error) {
			res, err = a.BeginAuth(ctx, req)
			return err
		})
	if err == nil && res == nil {
		err = fmt.Errorf("extension %q started no sign-in: %w", extName, ext.ErrUnavailable)
	}
	return res, err
}

// CompleteAuth hands extension extName the authorization server's
// redirect of a sign-in it started (see [ext.Authorizer]).
func (h *Host) CompleteAuth(ctx context.Context, extName string, req *ext.CompleteAuthRequest) (*ext.CompleteAuthResult, error) {
	e, err := h.authExtension(extName, req.User)
	if err != nil {
		return nil, err
	}
	var res *ext.CompleteAuthResult
	err = use(ctx, e, ext.CapabilityAuth, func() string { return fmt.Sprintf("completing a sign-in of %s to %q", req.User, req.Name) },
		func(a ext.Authorizer) (err error) {
			res, err = a.CompleteAuth(ctx, req)
			return err
		})
	if err == nil && res == nil {
		res = &ext.CompleteAuthResult{}
	}
	return res, err
}

// authExtension checks the user of a sign-in and finds its extension.
func (h *Host) authExtension(extName, user string) (*extension, error) {
	if user != OperatorUser {
		if err := checkUser(user); err != nil {
			return nil, err
		}
	}
	e := h.exts[extName]
	if e == nil {
		return nil, fmt.Errorf("no extension %q: %w", extName, ext.ErrNotFound)
	}
	if !e.descriptor().Has(ext.CapabilityAuth) {
		return nil, fmt.Errorf("extension %q signs nobody in (it has no auth capability): %w", extName, ext.ErrUnimplemented)
	}
	return e, nil
}
