package wire

import "errors"

// A bootstrap token, as the hub issues it and a joining node presents it in
// its JoinRequest, is "<id>.<secret>": 6 and 16 characters of [a-z0-9], as
// upstream's. The hub (hub/auth) keeps and checks tokens; both ends check
// their form here, the edge before it ever dials the hub.
const (
	TokenIDLen     = 6
	TokenSecretLen = 16
)

// ErrTokenMalformed is returned by ParseToken for a token that is not
// <6 chars [a-z0-9]>.<16 chars [a-z0-9]>.
var ErrTokenMalformed = errors.New("bootstrap token is malformed: want <6 characters [a-z0-9]>.<16 characters [a-z0-9]>")

// ParseToken splits a token "id.secret" into its parts. It returns
// ErrTokenMalformed, which does not echo the token, for anything else.
func ParseToken(token string) (id, secret string, err error) {
	if len(token) != TokenIDLen+1+TokenSecretLen || token[TokenIDLen] != '.' {
		return "", "", ErrTokenMalformed
	}
	id, secret = token[:TokenIDLen], token[TokenIDLen+1:]
	if !tokenPart(id) || !tokenPart(secret) {
		return "", "", ErrTokenMalformed
	}
	return id, secret, nil
}

// ValidTokenID reports whether id can be a token id: 6 characters of
// [a-z0-9].
func ValidTokenID(id string) bool { return len(id) == TokenIDLen && tokenPart(id) }

func tokenPart(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
