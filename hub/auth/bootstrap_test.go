package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGenerateToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id, secret := GenerateToken()
		token := id + "." + secret
		gotID, gotSecret, err := ParseToken(token)
		if err != nil || gotID != id || gotSecret != secret {
			t.Fatalf("ParseToken(GenerateToken() = %q) = %q, %q, %v", token, gotID, gotSecret, err)
		}
		if !ValidTokenID(id) {
			t.Errorf("ValidTokenID(%q) = false", id)
		}
		if seen[id] {
			t.Errorf("GenerateToken repeated id %q", id)
		}
		seen[id] = true
	}
}

func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		token      string
		id, secret string
	}{
		{"abcdef.0123456789abcdef", "abcdef", "0123456789abcdef"},
		{"000000.zzzzzzzzzzzzzzzz", "000000", "zzzzzzzzzzzzzzzz"},
		{"", "", ""},
		{"abcdef", "", ""},
		{"abcdef.", "", ""},
		{"abcdef.0123456789abcde", "", ""},   // secret too short
		{"abcdef.0123456789abcdef0", "", ""}, // too long
		{"abcde.0123456789abcdefg", "", ""},  // id too short
		{"ABCDEF.0123456789abcdef", "", ""},  // upper case
		{"abcdef:0123456789abcdef", "", ""},
		{"abcdef.0123456789abcde-", "", ""},
		{"abcdéf.0123456789abcdef", "", ""},
	} {
		id, secret, err := ParseToken(tc.token)
		if tc.id == "" {
			if !errors.Is(err, ErrTokenMalformed) {
				t.Errorf("ParseToken(%q) = %q, %q, %v; want %v", tc.token, id, secret, err, ErrTokenMalformed)
			}
			continue
		}
		if err != nil || id != tc.id || secret != tc.secret {
			t.Errorf("ParseToken(%q) = %q, %q, %v; want %q, %q", tc.token, id, secret, err, tc.id, tc.secret)
		}
	}
}

func TestNewBootstrapTokenSecret(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	s := NewBootstrapTokenSecret("abcdef", "0123456789abcdef", "berlin", 24*time.Hour, now)
	if s.Name != "bootstrap-token-abcdef" || s.Namespace != "kube-system" || s.Type != "bootstrap.kubernetes.io/token" {
		t.Errorf("secret %s/%s of type %q", s.Namespace, s.Name, s.Type)
	}
	want := map[string]string{
		"token-id":                       "abcdef",
		"token-secret":                   "0123456789abcdef",
		"usage-bootstrap-authentication": "true",
		"expiration":                     "2026-03-02T11:00:00Z",
	}
	if len(s.Data) != len(want) {
		t.Errorf("data has %d keys, want %d", len(s.Data), len(want))
	}
	for k, v := range want {
		if string(s.Data[k]) != v {
			t.Errorf("data[%s] = %q, want %q", k, s.Data[k], v)
		}
	}
	if s.Labels[SiteLabel] != "berlin" {
		t.Errorf("labels = %v, want the site", s.Labels)
	}
	if exp, ok := BootstrapTokenExpiration(s); !ok || !exp.Equal(now.Add(24*time.Hour)) {
		t.Errorf("BootstrapTokenExpiration = %v, %v", exp, ok)
	}

	forever := NewBootstrapTokenSecret("abcdef", "0123456789abcdef", "", 0, now)
	if _, ok := forever.Data["expiration"]; ok {
		t.Error("a token with ttl 0 has an expiration")
	}
	if _, ok := BootstrapTokenExpiration(forever); ok {
		t.Error("BootstrapTokenExpiration of a token without expiration reports one")
	}
	if forever.Labels != nil {
		t.Errorf("a token without site has labels %v", forever.Labels)
	}
}

func TestValidateBootstrapToken(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const token = "abcdef.0123456789abcdef"
	good := func(mutate ...func(*corev1.Secret)) *corev1.Secret {
		s := NewBootstrapTokenSecret("abcdef", "0123456789abcdef", "berlin", time.Hour, now)
		for _, m := range mutate {
			m(s)
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		token  string
		at     time.Time
		site   string
		err    error
	}{
		{name: "valid", secret: good(), token: token, at: now, site: "berlin"},
		{name: "valid just before expiry", secret: good(), token: token, at: now.Add(time.Hour - time.Second), site: "berlin"},
		{name: "no site", secret: good(func(s *corev1.Secret) { s.Labels = nil }), token: token, at: now},
		{name: "never expires", secret: good(func(s *corev1.Secret) { delete(s.Data, "expiration") }), token: token, at: now.Add(1000 * time.Hour), site: "berlin"},
		{name: "description", secret: good(func(s *corev1.Secret) { s.Data["description"] = []byte("line 3") }), token: token, at: now, site: "berlin"},

		{name: "malformed", secret: good(), token: "abcdef0123456789abcdef", at: now, err: ErrTokenMalformed},
		{name: "malformed even without secret", token: "nope", at: now, err: ErrTokenMalformed},
		{name: "no secret", token: token, at: now, err: ErrTokenNotFound},
		{name: "other token's secret", secret: good(func(s *corev1.Secret) { s.Name = "bootstrap-token-zzzzzz" }), token: token, at: now, err: ErrTokenNotFound},
		{name: "other namespace", secret: good(func(s *corev1.Secret) { s.Namespace = "default" }), token: token, at: now, err: ErrTokenNotFound},
		{name: "being deleted", secret: good(func(s *corev1.Secret) { s.DeletionTimestamp = &metav1.Time{Time: now} }), token: token, at: now, err: ErrTokenNotFound},
		{name: "wrong secret", secret: good(), token: "abcdef.0123456789abcdee", at: now, err: ErrTokenWrongSecret},
		{name: "no stored secret", secret: good(func(s *corev1.Secret) { delete(s.Data, "token-secret") }), token: token, at: now, err: ErrTokenWrongSecret},
		// the secret is checked before what only its holder may learn
		{name: "wrong secret, expired", secret: good(), token: "abcdef.0123456789abcdee", at: now.Add(2 * time.Hour), err: ErrTokenWrongSecret},
		{name: "expired", secret: good(), token: token, at: now.Add(time.Hour), err: ErrTokenExpired},
		{name: "long expired", secret: good(), token: token, at: now.Add(100 * time.Hour), err: ErrTokenExpired},
		{name: "bad expiration", secret: good(func(s *corev1.Secret) { s.Data["expiration"] = []byte("tomorrow") }), token: token, at: now, err: ErrTokenNotForAuthentication},
		{name: "not for authentication", secret: good(func(s *corev1.Secret) { delete(s.Data, "usage-bootstrap-authentication") }), token: token, at: now, err: ErrTokenNotForAuthentication},
		{name: "usage false", secret: good(func(s *corev1.Secret) { s.Data["usage-bootstrap-authentication"] = []byte("false") }), token: token, at: now, err: ErrTokenNotForAuthentication},
		{name: "opaque secret", secret: good(func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }), token: token, at: now, err: ErrTokenNotForAuthentication},
		{name: "mismatched token-id", secret: good(func(s *corev1.Secret) { s.Data["token-id"] = []byte("zzzzzz") }), token: token, at: now, err: ErrTokenNotForAuthentication},
	} {
		site, err := ValidateBootstrapToken(tc.secret, tc.token, tc.at)
		if tc.err == nil {
			if err != nil || site != tc.site {
				t.Errorf("%s: ValidateBootstrapToken = %q, %v; want %q", tc.name, site, err, tc.site)
			}
			continue
		}
		if !errors.Is(err, tc.err) || site != "" {
			t.Errorf("%s: ValidateBootstrapToken = %q, %v; want an error wrapping %v", tc.name, site, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcde") {
			t.Errorf("%s: error %q gives the token's secret away", tc.name, err)
		}
	}
}

// FuzzValidateBootstrapToken checks that no token a joining node sends
// makes validation panic or accept it against another token's Secret.
func FuzzValidateBootstrapToken(f *testing.F) {
	for _, s := range []string{"abcdef.0123456789abcdef", "abcdef.0123456789abcdee", "", ".", "abcdef.", "ABCDEF.0123456789ABCDEF"} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	secret := NewBootstrapTokenSecret("abcdef", "0123456789abcdef", "berlin", time.Hour, now)
	f.Fuzz(func(t *testing.T, token string) {
		id, sec, err := ParseToken(token)
		if err == nil && id+"."+sec != token {
			t.Errorf("ParseToken(%q) = %q, %q", token, id, sec)
		}
		if _, err := ValidateBootstrapToken(secret, token, now); err == nil && token != "abcdef.0123456789abcdef" {
			t.Errorf("ValidateBootstrapToken accepted %q", token)
		}
	})
}
