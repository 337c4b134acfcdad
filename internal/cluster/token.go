package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
)

// tokenContext separates node tokens from any other use of the secret
// (docs/design/013-cluster.md).
const tokenContext = "switchyard-node:"

// Token is node id's token: base64url(HMAC-SHA256(secret, context + id)),
// so that one secret serves every node, a node's token does not reveal the
// secret nor another node's token, and any node holding the secret can
// verify it.
func Token(secret, id string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(tokenContext + id))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// validToken reports whether token is id's, compared in constant time.
func validToken(secret, id, token string) bool {
	want := Token(secret, id)
	return subtle.ConstantTimeCompare([]byte(want), []byte(token)) == 1
}
