package host_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/host"
)

// TestConfigTrustedProxies: trustedProxies takes CIDRs and single
// addresses; a bad entry is an error naming the field, the entry's index
// and the entry, beside the file's other errors.
func TestConfigTrustedProxies(t *testing.T) {
	cfg, err := host.ParseConfig([]byte(`{"extensions":{},"trustedProxies":["10.0.0.0/8","2001:db8::/32","127.0.0.1"]}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.0.0.0/8", "2001:db8::/32", "127.0.0.1"}, cfg.TrustedProxies); diff != "" {
		t.Errorf("trustedProxies (-want +got):\n%s", diff)
	}
	_, err = host.ParseConfig([]byte(`{"extensions":{},"secrets":{"backend":"nope"},"trustedProxies":["10.0.0.0/8","10.0.0.0/33"]}`), t.TempDir())
	for _, want := range []string{`trustedProxies: entry 1 ("10.0.0.0/33") is not a CIDR`, "secrets.backend"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig with bad entries = %v, want it to say %s", err, want)
		}
	}
	if err := (&host.Config{TrustedProxies: []string{"10.0.0.0/8", "nope"}}).CheckListen(); err == nil ||
		!strings.Contains(err.Error(), `trustedProxies: entry 1 ("nope")`) {
		t.Errorf("CheckListen = %v", err)
	}
}
