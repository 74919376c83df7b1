package extmcp

import "testing"

// TestCCMethod checks how a client credentials client authenticates: as
// configured; private_key_jwt with a key; with a secret,
// client_secret_basic unless the authorization server lists only
// client_secret_post (go-sdk's client credentials handler follows the
// metadata too).
func TestCCMethod(t *testing.T) {
	secret, key := &SecretRef{Secret: "s"}, &SecretRef{Secret: "k"}
	for _, tc := range []struct {
		cfg     OAuthConfig
		methods []string
		want    string
	}{
		{OAuthConfig{ClientSecret: secret}, nil, authBasic},
		{OAuthConfig{ClientSecret: secret}, []string{"client_secret_post", "client_secret_basic"}, authBasic},
		{OAuthConfig{ClientSecret: secret}, []string{"private_key_jwt", "client_secret_post"}, authPost},
		{OAuthConfig{ClientSecret: secret, TokenEndpointAuth: authBasic}, []string{"client_secret_post"}, authBasic},
		{OAuthConfig{PrivateKey: key}, []string{"client_secret_post"}, authJWT},
	} {
		s := &ccSource{cfg: tc.cfg, methods: tc.methods}
		if got := s.method(); got != tc.want {
			t.Errorf("%+v with %v: %s, want %s", tc.cfg, tc.methods, got, tc.want)
		}
	}
}
