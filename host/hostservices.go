package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/services"
	"github.com/agenthost/agenthost/secrets"
)

// hostServices is what the host offers one extension ([ext.Host]). Every
// store it hands out is scoped to that extension and the named user: an
// extension can never reach another extension's or another user's values.
type hostServices struct {
	h   *Host
	ext string
	// userTools: the extension has the usertools capability (its
	// descriptor's), so its tools' scoped descriptions are honoured.
	userTools bool
}

var _ ext.Host = (*hostServices)(nil)

func (s *hostServices) SetUserTools(_ context.Context, user string, tools []ext.Tool) error {
	if err := checkUser(user); err != nil {
		return err
	}
	return s.h.reg.setUser(s.ext, user, s.honourScoped(tools))
}

func (s *hostServices) SetSystemTools(_ context.Context, tools []ext.Tool) error {
	return s.h.reg.setSystem(s.ext, s.honourScoped(tools))
}

// SetUserCatalog checks every kind before it replaces any, so a bad
// catalog changes nothing: the extras' conflicts are checked before the
// tools are replaced, under the lock that serializes publications
// (extras.pub), so that extras.set cannot then refuse.
func (s *hostServices) SetUserCatalog(_ context.Context, user string, c *ext.Catalog) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if c == nil {
		c = &ext.Catalog{}
	}
	if err := validateTools(c.Tools); err != nil {
		return err
	}
	if err := validateExtras(c); err != nil {
		return err
	}
	if len(c.Tools)+len(c.Prompts)+len(c.Resources)+len(c.ResourceTemplates)+len(c.Instructions) == 0 && s.h.reg.sleeping(user) {
		return nil // retired for idleness: the catalog stays (see registry.asleep)
	}
	s.h.extras.pub.Lock()
	defer s.h.extras.pub.Unlock()
	if err := s.h.extras.conflict(s.ext, user, c); err != nil {
		return err
	}
	if err := s.h.reg.setUser(s.ext, user, s.honourScoped(c.Tools)); err != nil {
		return err
	}
	return s.h.extras.set(s.ext, user, c)
}

func (s *hostServices) Notify(ctx context.Context, user, method string, params json.RawMessage) error {
	if err := checkUser(user); err != nil {
		return err
	}
	return s.h.notifyUser(ctx, user, method, params)
}

func (s *hostServices) RequestUser(ctx context.Context, user, method string, params json.RawMessage) (json.RawMessage, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	return s.h.requestUser(ctx, user, method, params)
}

var validService = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ConnectService starts (or reuses) the user's process of service name,
// asking the extension for its spec only when none runs. HOME and the
// default working directory are the user's data folder for the extension.
func (s *hostServices) ConnectService(ctx context.Context, name, user string) (ext.ServiceConn, error) {
	e := s.h.exts[s.ext]
	return s.connect(ctx, name, user, func(ctx context.Context) (spec *ext.ProcessSpec, err error) {
		err = use(ctx, e, ext.CapabilityServices, func() string { return fmt.Sprintf("describing service %q", name) },
			func(sp ext.ServiceProvider) (err error) {
				spec, err = sp.StartService(ctx, name, user)
				return err
			})
		return spec, err
	})
}

// ConnectServiceSpec is ConnectService with the extension's own spec: no
// StartService round trip. The extension must list the services
// capability, as it must to be asked for a spec.
func (s *hostServices) ConnectServiceSpec(ctx context.Context, name, user string, spec *ext.ProcessSpec) (ext.ServiceConn, error) {
	if spec == nil {
		return nil, fmt.Errorf("service %q: nil spec: %w", name, ext.ErrInvalidArgument)
	}
	if e := s.h.exts[s.ext]; !e.descriptor().Has(ext.CapabilityServices) {
		return nil, fmt.Errorf("extension %q offers no %s capability, so it may not start service processes: %w",
			s.ext, ext.CapabilityServices, ext.ErrPermission)
	}
	return s.connect(ctx, name, user, func(context.Context) (*ext.ProcessSpec, error) { return spec, nil })
}

// connect starts (or reuses) the user's process of service name; start
// gives its spec when none runs.
func (s *hostServices) connect(ctx context.Context, name, user string, start func(context.Context) (*ext.ProcessSpec, error)) (ext.ServiceConn, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	if !validService.MatchString(name) {
		return nil, fmt.Errorf("service name %q is not valid: %w", name, ext.ErrInvalidArgument)
	}
	home := filepath.Join(s.h.dataDir, "users", user, s.ext, "data")
	h, err := s.h.services.Connect(ctx, services.Key{Extension: s.ext, Service: name, User: user}, home, start)
	w := slotWaiter{ext: s.ext, user: user}
	if err != nil {
		if errors.Is(err, services.ErrBusy) {
			s.h.slots.add(w) // refreshed as soon as a slot frees (slots.go)
		}
		return nil, err
	}
	s.h.slots.remove(w)
	return h, nil
}

func (s *hostServices) ActingUser(_ context.Context, conversation string) (string, error) {
	return s.h.actingUser(conversation)
}

func (s *hostServices) UserStore(user string) ext.UserStore {
	return &userStore{h: s.h, ext: s.ext, user: user}
}

// userStore is one user's storage, scoped to one extension.
type userStore struct {
	h    *Host
	ext  string
	user string
}

func (u *userStore) check() error {
	if u.user == OperatorUser {
		return nil
	}
	return checkUser(u.user)
}

func (u *userStore) Secrets() ext.Secrets   { return (*userSecrets)(u) }
func (u *userStore) Settings() ext.Settings { return (*userSettings)(u) }

// Paths returns, and creates (0700), the user's folders for the extension.
func (u *userStore) Paths(context.Context) (ext.Paths, error) {
	if err := checkUser(u.user); err != nil {
		return ext.Paths{}, err
	}
	base := filepath.Join(u.h.dataDir, "users", u.user, u.ext)
	p := ext.Paths{Data: filepath.Join(base, "data"), State: filepath.Join(base, "state"), Cache: filepath.Join(base, "cache")}
	for _, d := range []string{p.Data, p.State, p.Cache} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return ext.Paths{}, fmt.Errorf("creating user folder: %w", err)
		}
	}
	return p, nil
}

type userSecrets userStore

func (s *userSecrets) Get(ctx context.Context, name string) (string, error) {
	if err := (*userStore)(s).check(); err != nil {
		return "", err
	}
	v, err := s.h.secrets.Get(ctx, secretKey(s.ext, s.user, name))
	if err != nil {
		return "", mapSecretErr(err)
	}
	return v.Reveal(), nil
}

func (s *userSecrets) Set(ctx context.Context, name, value string) error {
	if err := (*userStore)(s).check(); err != nil {
		return err
	}
	return mapSecretErr(s.h.secrets.Set(ctx, secretKey(s.ext, s.user, name), secrets.NewValue(value)))
}

func (s *userSecrets) Delete(ctx context.Context, name string) error {
	if err := (*userStore)(s).check(); err != nil {
		return err
	}
	return mapSecretErr(s.h.secrets.Delete(ctx, secretKey(s.ext, s.user, name)))
}

func (s *userSecrets) List(ctx context.Context) ([]string, error) {
	if err := (*userStore)(s).check(); err != nil {
		return nil, err
	}
	k := secretKey(s.ext, s.user, "x")
	names, err := s.h.secrets.List(ctx, k.Extension, k.User)
	return names, mapSecretErr(err)
}

type userSettings userStore

func (s *userSettings) Get(ctx context.Context, section string) (json.RawMessage, error) {
	if err := (*userStore)(s).check(); err != nil {
		return nil, err
	}
	if s.user == OperatorUser {
		return nil, fmt.Errorf("the operator has no settings: %w", ext.ErrInvalidArgument)
	}
	v, err := s.h.settings.Get(ctx, s.ext, s.user, section)
	return v, mapSettingsErr(err)
}

func (s *userSettings) Set(ctx context.Context, section string, values json.RawMessage) error {
	if err := checkUser(s.user); err != nil {
		return err
	}
	return s.h.setSettings(ctx, s.ext, s.user, section, values, false)
}
