package wire

import (
	"strings"
	"testing"
)

func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		token, id, secret string
	}{
		{"abcdef.0123456789abcdef", "abcdef", "0123456789abcdef"},
		{"abcdef0123456789abcdef", "", ""},
		{"abcdef.0123456789abcde", "", ""},
		{"ABCDEF.0123456789abcdef", "", ""},
		{"abcde.f0123456789abcdef", "", ""},
		{"abcdef:0123456789abcdef", "", ""},
		{"abcdef.0123456789abcde-", "", ""},
		{"", "", ""},
	} {
		id, secret, err := ParseToken(tc.token)
		if id != tc.id || secret != tc.secret || (tc.id == "") != (err == ErrTokenMalformed) {
			t.Errorf("ParseToken(%q) = %q, %q, %v; want %q, %q", tc.token, id, secret, err, tc.id, tc.secret)
		}
		if err != nil && strings.Contains(err.Error(), tc.token) && tc.token != "" {
			t.Errorf("ParseToken(%q) = %v: the error echoes the token", tc.token, err)
		}
	}
}
