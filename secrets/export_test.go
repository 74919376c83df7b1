package secrets

import (
	"slices"
	"sync"

	"github.com/zalando/go-keyring"
)

// NewKeychainWithFake returns a Keychain backed by fake instead of the OS
// keychain, as if on Linux with a session bus.
func NewKeychainWithFake(opts *KeychainOptions, fake *FakeKeyring) (*Keychain, error) {
	return newKeychain(opts, fake, func(string) string { return "unix:path=/fake/bus" }, "linux")
}

// FakeKeyring is a mutex-guarded in-memory stand-in for go-keyring
// (go-keyring's MockInit is not safe for concurrent use).
type FakeKeyring struct {
	// Hook, when set, runs before every call with the operation ("get",
	// "set", "delete"), the account and (for "set") the secret; a non-nil
	// error fails the call. It may block or panic to simulate a hung or
	// misbehaving keychain. It must be set before the Keychain is used.
	Hook func(op, account, secret string) error

	mu    sync.Mutex
	items map[[2]string]string
}

// NewFakeKeyring returns an empty FakeKeyring.
func NewFakeKeyring() *FakeKeyring {
	return &FakeKeyring{items: map[[2]string]string{}}
}

func (f *FakeKeyring) hook(op, account, secret string) error {
	if f.Hook == nil {
		return nil
	}
	return f.Hook(op, account, secret)
}

func (f *FakeKeyring) Set(service, account, secret string) error {
	if err := f.hook("set", account, secret); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items[[2]string{service, account}] = secret
	return nil
}

func (f *FakeKeyring) Get(service, account string) (string, error) {
	if err := f.hook("get", account, ""); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.items[[2]string{service, account}]
	if !ok {
		return "", keyring.ErrNotFound
	}
	return s, nil
}

func (f *FakeKeyring) Delete(service, account string) error {
	if err := f.hook("delete", account, ""); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.items[[2]string{service, account}]; !ok {
		return keyring.ErrNotFound
	}
	delete(f.items, [2]string{service, account})
	return nil
}

// Accounts returns the sorted accounts stored under service.
func (f *FakeKeyring) Accounts(service string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.items {
		if k[0] == service {
			out = append(out, k[1])
		}
	}
	slices.Sort(out)
	return out
}

// Item returns the raw item stored under service and account.
func (f *FakeKeyring) Item(service, account string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.items[[2]string{service, account}]
	return s, ok
}

// Exported for tests of the account encoding.
var (
	EncodeSecretAccount = secretAccount
	DecodeAccount       = decodeAccount
)
