// Package auth decides who may call envd and as whom.
//
// Two separate things, as on the wire:
//   - the access token (X-Access-Token), which gates every route but the few
//     declared public; it is compared in constant time, and until one is set
//     (by a flag or by POST /init) every request is allowed;
//   - the run-as user, named by the username of an "Authorization: Basic"
//     header (password empty), else the sandbox's default user.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/internal/identity"
)

// Token holds the access token. The zero value has none set.
type Token struct {
	mu    sync.RWMutex
	value string // guarded by mu
}

// Set replaces the token; empty clears it.
func (t *Token) Set(v string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.value = v
}

// Get returns the token, empty when none is set.
func (t *Token) Get() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.value
}

// IsSet tells whether requests must carry the token.
func (t *Token) IsSet() bool { return t.Get() != "" }

// Match tells whether got is the token, in time independent of where they
// differ. False when no token is set.
func (t *Token) Match(got string) bool {
	want := t.Get()
	if want == "" {
		return false
	}
	// Hash both sides so the compare also hides the token's length.
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// Signature errors, with the messages upstream gives.
var (
	ErrSignatureMissing = errors.New("missing signature query parameter")
	ErrSignatureExpired = errors.New("signature is already expired")
	ErrSignatureInvalid = errors.New("invalid signature")
	// ErrSignatureNoPath: a signature binds one exact path, and one made
	// for no path authorizes nothing (not every multipart filename).
	ErrSignatureNoPath = errors.New("a signed URL must name its file: the path query parameter is empty, and a signature for an empty path authorizes nothing; sign the exact path of the file and send it as the path parameter")
)

// Sign returns the signature for a /files URL: "v1_" and the unpadded
// base64 of SHA-256 over "path:operation:username:token[:expiration]".
// operation is "read" or "write"; expiration is unix seconds, 0 for none.
// A signature for an empty path is refused by CheckSignature.
func Sign(path, operation, username, token string, expiration int64) string {
	s := path + ":" + operation + ":" + username + ":" + token
	if expiration != 0 {
		s += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(s))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// CheckSignature validates a signed /files URL against the token.
// expiration is the raw signature_expiration value, empty for none. The
// signature binds path exactly: an empty path is refused
// (ErrSignatureNoPath), whatever the signature.
func (t *Token) CheckSignature(sig, path, operation, username, expiration string, now time.Time) error {
	if sig == "" {
		return ErrSignatureMissing
	}
	if path == "" {
		return ErrSignatureNoPath
	}
	var exp int64
	if expiration != "" {
		var err error
		if exp, err = strconv.ParseInt(expiration, 10, 64); err != nil {
			return fmt.Errorf("%w: signature_expiration %q is not unix seconds", ErrSignatureInvalid, expiration)
		}
		if now.Unix() > exp {
			return ErrSignatureExpired
		}
	}
	want := Sign(path, operation, username, t.Get(), exp)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return ErrSignatureInvalid
	}
	return nil
}

// BasicUser returns the username of an "Authorization: Basic" header value;
// ok is false when the header is absent or not Basic.
func BasicUser(header string) (name string, ok bool) {
	const prefix = "Basic "
	if len(header) < len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(header[len(prefix):]))
	if err != nil {
		return "", false
	}
	name, _, ok = strings.Cut(string(raw), ":")
	if !ok {
		// No colon: not user:password, as net/http's BasicAuth.
		return "", false
	}
	return name, true
}

type userKey struct{}

// WithUser returns ctx carrying the run-as user.
func WithUser(ctx context.Context, u *identity.User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the run-as user put in ctx by WithUser, or nil.
func UserFrom(ctx context.Context) *identity.User {
	u, _ := ctx.Value(userKey{}).(*identity.User)
	return u
}
