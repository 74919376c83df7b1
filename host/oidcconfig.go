package host

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// OIDCConfig names the OpenID Connect provider people sign in with on the
// settings page and the OAuth consent page (the "oidc" block of the
// operator's file). The client secret is never in the file: it is an
// operator secret (`agenthost secret set --operator [--ext E] NAME`), read
// at each sign-in.
type OIDCConfig struct {
	// Name is the provider's name on the sign-in button ("Sign in with
	// Google"; default "your identity provider").
	Name string `json:"name,omitempty"`
	// Issuer is the provider's issuer URL (https, or http on loopback
	// only), whose /.well-known/openid-configuration is read.
	Issuer string `json:"issuer"`
	// ClientID is the client registered at the provider, with the redirect
	// URL <publicURL>/settings/oidc/callback.
	ClientID string `json:"clientID"`
	// ClientSecret is the name of the operator secret holding the client
	// secret; ClientSecretExtension the extension it is stored under
	// (default: the only extension of this file).
	ClientSecret          string `json:"clientSecret"`
	ClientSecretExtension string `json:"clientSecretExtension,omitempty"`
	// UserClaim is the ID token claim that is the user's ID (default
	// "email", lowercased, and only when email_verified is true). Its value
	// must be a valid user ID (1-128 of A-Z a-z 0-9 . _ @ + -); a person
	// whose value is not is refused, with the reason.
	UserClaim string `json:"userClaim,omitempty"`
	// GroupsClaim is the ID token claim listing the person's groups
	// (default "groups").
	GroupsClaim string `json:"groupsClaim,omitempty"`
	// Scopes are asked for besides "openid" (default "email", "profile").
	Scopes []string `json:"scopes,omitempty"`
	// RecheckMinutes is how often a signed-in person's web session asks
	// the provider again, with the refresh token kept from their sign-in
	// (default 15; fractions allowed): a provider that refuses the
	// refresh (they were removed there), or whose new ID token the rule
	// no longer admits, disables the user. Only providers that give a
	// refresh token are asked (most need the offline_access scope);
	// without one, the rule is checked at each sign-in only.
	RecheckMinutes float64 `json:"recheckMinutes,omitempty"`
	// The admission rule: a person is admitted when their verified email
	// is in one of AllowedDomains, or one of their groups is in
	// AllowedGroups, or their user ID is in AllowedUsers. At least one of
	// them must be set: a provider such as Google vouches for anyone with
	// an account, so "no rule" is refused rather than read as "everyone".
	AllowedDomains []string `json:"allowedDomains,omitempty"`
	AllowedGroups  []string `json:"allowedGroups,omitempty"`
	AllowedUsers   []string `json:"allowedUsers,omitempty"`
}

// On reports whether a provider is configured.
func (o *OIDCConfig) On() bool { return o != nil && o.Issuer != "" }

// Defaults of the oidc block.
const (
	DefaultOIDCUserClaim   = "email"
	DefaultOIDCGroupsClaim = "groups"
)

// WithDefaults returns o with its zero fields filled in; extension is the
// only extension of the file, for ClientSecretExtension.
func (o OIDCConfig) WithDefaults(extensions map[string]ExtensionConfig) OIDCConfig {
	if o.Name == "" {
		o.Name = "your identity provider"
	}
	if o.UserClaim == "" {
		o.UserClaim = DefaultOIDCUserClaim
	}
	if o.GroupsClaim == "" {
		o.GroupsClaim = DefaultOIDCGroupsClaim
	}
	if o.RecheckMinutes == 0 {
		o.RecheckMinutes = 15
	}
	if o.Scopes == nil {
		o.Scopes = []string{"email", "profile"}
	}
	if o.ClientSecretExtension == "" && len(extensions) == 1 {
		for name := range extensions {
			o.ClientSecretExtension = name
		}
	}
	for i, d := range o.AllowedDomains {
		o.AllowedDomains[i] = strings.ToLower(strings.TrimPrefix(d, "@"))
	}
	return o
}

var (
	claimName  = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)
	domainName = regexp.MustCompile(`^@?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$`)
	scopeToken = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]+$`)
)

func (o *OIDCConfig) validate(extensions map[string]ExtensionConfig) []error {
	var errs []error
	u, err := url.Parse(o.Issuer)
	switch {
	case o.Issuer == "":
		errs = append(errs, errors.New("oidc.issuer: required"))
	case err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		errs = append(errs, fmt.Errorf("oidc.issuer: %q is not an absolute URL without query or fragment", o.Issuer))
	case u.Scheme == "https":
	case u.Scheme == "http" && loopbackHost(u.Hostname()):
	default:
		errs = append(errs, fmt.Errorf("oidc.issuer: %q must be https (http only on loopback, for tests)", o.Issuer))
	}
	if o.ClientID == "" {
		errs = append(errs, errors.New("oidc.clientID: required"))
	}
	if o.ClientSecret == "" {
		errs = append(errs, errors.New("oidc.clientSecret: required: the name of an operator secret holding the client secret (agenthost secret set --operator NAME), never the secret itself"))
	}
	switch ext := o.ClientSecretExtension; {
	case ext == "" && len(extensions) != 1:
		errs = append(errs, errors.New("oidc.clientSecretExtension: required when the file has more than one extension: the extension the operator secret is stored under"))
	case ext != "" && extensions[ext].Path == "":
		errs = append(errs, fmt.Errorf("oidc.clientSecretExtension: %q is not an extension of this file", ext))
	}
	for _, c := range []struct{ field, v string }{{"userClaim", o.UserClaim}, {"groupsClaim", o.GroupsClaim}} {
		if c.v != "" && !claimName.MatchString(c.v) {
			errs = append(errs, fmt.Errorf("oidc.%s: %q is not a claim name", c.field, c.v))
		}
	}
	for i, s := range o.Scopes {
		if !scopeToken.MatchString(s) {
			errs = append(errs, fmt.Errorf("oidc.scopes[%d]: %q is not a scope", i, s))
		}
	}
	if o.RecheckMinutes < 0 {
		errs = append(errs, errors.New("oidc.recheckMinutes: must not be negative"))
	}
	if len(o.AllowedDomains)+len(o.AllowedGroups)+len(o.AllowedUsers) == 0 {
		errs = append(errs, errors.New("oidc: set allowedDomains, allowedGroups or allowedUsers: who the provider vouches for is not enough (Google vouches for every account), and there is no admit-everyone default"))
	}
	for i, d := range o.AllowedDomains {
		if !domainName.MatchString(strings.ToLower(d)) {
			errs = append(errs, fmt.Errorf("oidc.allowedDomains[%d]: %q is not a domain name", i, d))
		}
	}
	for i, g := range o.AllowedGroups {
		if g == "" {
			errs = append(errs, fmt.Errorf("oidc.allowedGroups[%d]: empty", i))
		}
	}
	for i, u := range o.AllowedUsers {
		if err := checkUser(u); err != nil {
			errs = append(errs, fmt.Errorf("oidc.allowedUsers[%d]: %w", i, err))
		}
	}
	return errs
}

// loopbackHost reports whether h (no port) is a loopback name or address.
func loopbackHost(h string) bool {
	ip := net.ParseIP(h)
	return h == "localhost" || (ip != nil && ip.IsLoopback())
}
