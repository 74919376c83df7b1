package control

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// Users is the operator's administration of users the CLI reaches
// through the socket (agenthost user ...). The [Tokens] given to
// [Handler] provides it when it implements this interface; otherwise the
// verbs fail clearly.
type Users interface {
	ListUsers(ctx context.Context) ([]UserInfo, error)
	DisableUser(ctx context.Context, user string) error
	EnableUser(ctx context.Context, user string) error
	DeleteUser(ctx context.Context, user string, deleteData bool) (UserDeleted, error)
	SetUserGroups(ctx context.Context, user string, groups []string) (UserInfo, error)
}

// UserInfo describes a user for the operator: who, since when, where
// from, what they hold; never a secret.
type UserInfo struct {
	Name       string    `json:"name"`
	Source     string    `json:"source"`
	Email      string    `json:"email,omitempty"`
	Created    time.Time `json:"created"`
	LastSeen   time.Time `json:"lastSeen,omitzero"`
	Disabled   time.Time `json:"disabled,omitzero"`
	DisabledBy string    `json:"disabledBy,omitempty"`
	// Groups are all the user's groups; OperatorGroups those the
	// operator set (agenthost user set-groups).
	Groups         []string `json:"groups"`
	OperatorGroups []string `json:"operatorGroups"`
	// Tokens counts their bearer tokens, Apps their connected apps
	// (OAuth grants).
	Tokens int `json:"tokens"`
	Apps   int `json:"apps"`
	// Trouble lists their servers in trouble, "name: state (reason)",
	// from the status the host has.
	Trouble []string `json:"trouble,omitempty"`
}

// UserDeleted says what deleting a user removed and kept.
type UserDeleted struct {
	User string `json:"user"`
	// Folder is the user's data folder; DataDeleted says whether it was
	// removed (--delete-data) or kept.
	Folder      string `json:"folder"`
	DataDeleted bool   `json:"dataDeleted"`
}

type userRequest struct {
	User       string   `json:"user"`
	DeleteData bool     `json:"deleteData,omitempty"`
	Groups     []string `json:"groups,omitempty"`
}

// userRoutes registers the user verbs.
func userRoutes(mux *http.ServeMux, tokens Tokens) {
	users, _ := tokens.(Users)
	need := func() error {
		if users == nil {
			return fmt.Errorf("this host keeps no users: %w", ext.ErrUnimplemented)
		}
		return nil
	}
	mux.HandleFunc("GET /v1/users", func(w http.ResponseWriter, r *http.Request) {
		if err := need(); err != nil {
			reply(w, nil, err)
			return
		}
		v, err := users.ListUsers(r.Context())
		reply(w, v, err)
	})
	ok := struct{}{}
	do(mux, "POST /v1/users/disable", func(r *http.Request, req *userRequest) (any, error) {
		if err := need(); err != nil {
			return nil, err
		}
		return ok, users.DisableUser(r.Context(), req.User)
	})
	do(mux, "POST /v1/users/enable", func(r *http.Request, req *userRequest) (any, error) {
		if err := need(); err != nil {
			return nil, err
		}
		return ok, users.EnableUser(r.Context(), req.User)
	})
	do(mux, "POST /v1/users/delete", func(r *http.Request, req *userRequest) (any, error) {
		if err := need(); err != nil {
			return nil, err
		}
		return users.DeleteUser(r.Context(), req.User, req.DeleteData)
	})
	do(mux, "POST /v1/users/groups", func(r *http.Request, req *userRequest) (any, error) {
		if err := need(); err != nil {
			return nil, err
		}
		return users.SetUserGroups(r.Context(), req.User, req.Groups)
	})
}

// ListUsers lists the users the host knows.
func (c *Client) ListUsers(ctx context.Context) ([]UserInfo, error) {
	var out []UserInfo
	return out, c.do(ctx, "GET", "/v1/users", url.Values{}, nil, &out)
}

// DisableUser disables a user at once (see [Users]).
func (c *Client) DisableUser(ctx context.Context, user string) error {
	return c.do(ctx, "POST", "/v1/users/disable", nil, userRequest{User: user}, nil)
}

// EnableUser lets a disabled user sign in again.
func (c *Client) EnableUser(ctx context.Context, user string) error {
	return c.do(ctx, "POST", "/v1/users/enable", nil, userRequest{User: user}, nil)
}

// DeleteUser deletes a user, and their data folder with deleteData.
func (c *Client) DeleteUser(ctx context.Context, user string, deleteData bool) (UserDeleted, error) {
	var out UserDeleted
	return out, c.do(ctx, "POST", "/v1/users/delete", nil, userRequest{User: user, DeleteData: deleteData}, &out)
}

// SetUserGroups replaces the groups the operator gives user.
func (c *Client) SetUserGroups(ctx context.Context, user string, groups []string) (UserInfo, error) {
	var out UserInfo
	return out, c.do(ctx, "POST", "/v1/users/groups", nil, userRequest{User: user, Groups: groups}, &out)
}
