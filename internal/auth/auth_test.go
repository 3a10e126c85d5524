package auth_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/identity"
)

func TestTokenMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		token string // "" leaves the token unset
		got   string
		want  bool
	}{
		{name: "unset token never matches empty", token: "", got: "", want: false},
		{name: "unset token never matches anything", token: "", got: "secret", want: false},
		{name: "right token", token: "secret", got: "secret", want: true},
		{name: "empty header", token: "secret", got: "", want: false},
		{name: "wrong token", token: "secret", got: "secreT", want: false},
		{name: "prefix of the token", token: "secret", got: "secre", want: false},
		{name: "token with a suffix", token: "secret", got: "secret ", want: false},
		{name: "case differs", token: "secret", got: "SECRET", want: false},
		{name: "unicode token", token: "sécret-ü", got: "sécret-ü", want: true},
		{name: "long token", token: strings.Repeat("x", 4096), got: strings.Repeat("x", 4096), want: true},
		{name: "long token off by one at the end", token: strings.Repeat("x", 4096), got: strings.Repeat("x", 4095) + "y", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var tok auth.Token
			tok.Set(tt.token)
			if got := tok.Match(tt.got); got != tt.want {
				t.Errorf("Match(%q) with token %q = %v, want %v", tt.got, tt.token, got, tt.want)
			}
			if got, want := tok.IsSet(), tt.token != ""; got != want {
				t.Errorf("IsSet() = %v, want %v", got, want)
			}
			if got := tok.Get(); got != tt.token {
				t.Errorf("Get() = %q, want %q", got, tt.token)
			}
		})
	}
}

func TestTokenSetClear(t *testing.T) {
	t.Parallel()
	var tok auth.Token
	if tok.IsSet() || tok.Match("") {
		t.Fatal("zero Token must be unset and match nothing")
	}
	tok.Set("a")
	if !tok.Match("a") {
		t.Fatal("Match after Set failed")
	}
	tok.Set("b")
	if tok.Match("a") || !tok.Match("b") {
		t.Fatal("Set did not replace the token")
	}
	tok.Set("")
	if tok.IsSet() || tok.Match("") || tok.Match("b") {
		t.Fatal("Set(\"\") did not clear the token")
	}
}

// TestTokenConcurrent runs Set and Match together, for the race detector.
func TestTokenConcurrent(t *testing.T) {
	t.Parallel()
	var tok auth.Token
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				if i%2 == 0 {
					tok.Set(strconv.Itoa(j))
				} else {
					tok.Match(strconv.Itoa(j))
					tok.IsSet()
				}
			}
		})
	}
	wg.Wait()
}

// upstreamSign is the signature as docs/wire.md ("Signed /files URLs")
// spells it, written independently of auth.Sign.
func upstreamSign(path, op, user, token string, exp int64) string {
	s := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		s += ":" + strconv.FormatInt(exp, 10)
	}
	sum := sha256.Sum256([]byte(s))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

func TestSign(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		path, op, user, token string
		exp                   int64
	}{
		{name: "read without expiration", path: "/home/user/a.txt", op: "read", user: "user", token: "tok"},
		{name: "write with expiration", path: "a.txt", op: "write", user: "root", token: "tok", exp: 1900000000},
		{name: "no username", path: "/tmp/x", op: "read", user: "", token: "tok"},
		{name: "path with colons", path: "/tmp/a:b:c", op: "read", user: "user", token: "t:o:k"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := auth.Sign(tt.path, tt.op, tt.user, tt.token, tt.exp)
			if want := upstreamSign(tt.path, tt.op, tt.user, tt.token, tt.exp); got != want {
				t.Errorf("Sign = %q, want %q", got, want)
			}
			if strings.Contains(got, "=") {
				t.Errorf("Sign = %q: must be unpadded base64", got)
			}
		})
	}
}

func TestCheckSignature(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	future := now.Add(time.Hour).Unix()
	past := now.Add(-time.Second).Unix()
	const (
		path = "/home/user/f.txt"
		user = "user"
		tok  = "the-token"
	)
	valid := auth.Sign(path, "read", user, tok, 0)
	tests := []struct {
		name       string
		sig        string
		path, op   string
		user, exp  string
		wantErr    error  // nil: valid
		wantSubstr string // extra text the error must hold
	}{
		{name: "valid", sig: valid, path: path, op: "read", user: user},
		{name: "valid with expiration", sig: auth.Sign(path, "read", user, tok, future), path: path, op: "read", user: user, exp: strconv.FormatInt(future, 10)},
		{name: "expiration exactly now", sig: auth.Sign(path, "read", user, tok, now.Unix()), path: path, op: "read", user: user, exp: strconv.FormatInt(now.Unix(), 10)},
		{name: "expired", sig: auth.Sign(path, "read", user, tok, past), path: path, op: "read", user: user, exp: strconv.FormatInt(past, 10), wantErr: auth.ErrSignatureExpired},
		{name: "expired beats a bad signature", sig: "v1_garbage", path: path, op: "read", user: user, exp: strconv.FormatInt(past, 10), wantErr: auth.ErrSignatureExpired},
		{name: "missing", sig: "", path: path, op: "read", user: user, wantErr: auth.ErrSignatureMissing},
		{name: "garbage", sig: "v1_garbage", path: path, op: "read", user: user, wantErr: auth.ErrSignatureInvalid},
		{name: "wrong operation", sig: valid, path: path, op: "write", user: user, wantErr: auth.ErrSignatureInvalid},
		{name: "wrong path", sig: valid, path: "/home/user/g.txt", op: "read", user: user, wantErr: auth.ErrSignatureInvalid},
		{name: "wrong user", sig: valid, path: path, op: "read", user: "root", wantErr: auth.ErrSignatureInvalid},
		{name: "signed without expiration, sent with one", sig: valid, path: path, op: "read", user: user, exp: strconv.FormatInt(future, 10), wantErr: auth.ErrSignatureInvalid},
		{name: "signed with expiration, sent without", sig: auth.Sign(path, "read", user, tok, future), path: path, op: "read", user: user, wantErr: auth.ErrSignatureInvalid},
		{name: "other token", sig: auth.Sign(path, "read", user, "other", 0), path: path, op: "read", user: user, wantErr: auth.ErrSignatureInvalid},
		{name: "bad expiration", sig: valid, path: path, op: "read", user: user, exp: "tomorrow", wantErr: auth.ErrSignatureInvalid, wantSubstr: `"tomorrow" is not unix seconds`},
		// A signature made for no path authorizes nothing, valid or not.
		{name: "signed for an empty path", sig: auth.Sign("", "write", user, tok, 0), path: "", op: "write", user: user, wantErr: auth.ErrSignatureNoPath, wantSubstr: "sign the exact path"},
		{name: "signed for an empty path with expiration", sig: auth.Sign("", "read", user, tok, future), path: "", op: "read", user: user, exp: strconv.FormatInt(future, 10), wantErr: auth.ErrSignatureNoPath},
		{name: "expiration overflows", sig: valid, path: path, op: "read", user: user, exp: "99999999999999999999", wantErr: auth.ErrSignatureInvalid, wantSubstr: "not unix seconds"},
	}
	var token auth.Token
	token.Set(tok)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := token.CheckSignature(tt.sig, tt.path, tt.op, tt.user, tt.exp, now)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("CheckSignature: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("CheckSignature: %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantSubstr) {
				t.Errorf("CheckSignature: %q does not say %q", err, tt.wantSubstr)
			}
		})
	}
}

// The signature messages are on the wire (docs/wire.md, "Signed /files URLs").
func TestSignatureMessages(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]string{
		auth.ErrSignatureMissing: "missing signature query parameter",
		auth.ErrSignatureExpired: "signature is already expired",
		auth.ErrSignatureInvalid: "invalid signature",
	} {
		if err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	}
}

func TestBasicUser(t *testing.T) {
	t.Parallel()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name     string
		header   string
		wantName string
		wantOK   bool
	}{
		{name: "absent", header: "", wantOK: false},
		{name: "root as the SDK sends it", header: "Basic cm9vdDo=", wantName: "root", wantOK: true},
		{name: "user", header: "Basic " + b64("user:"), wantName: "user", wantOK: true},
		{name: "password ignored", header: "Basic " + b64("user:pw:with:colons"), wantName: "user", wantOK: true},
		{name: "empty username", header: "Basic " + b64(":"), wantName: "", wantOK: true},
		{name: "lowercase scheme", header: "basic " + b64("root:"), wantName: "root", wantOK: true},
		{name: "uppercase scheme", header: "BASIC " + b64("root:"), wantName: "root", wantOK: true},
		{name: "extra spaces around the credentials", header: "Basic   " + b64("root:") + "  ", wantName: "root", wantOK: true},
		{name: "no colon", header: "Basic " + b64("root"), wantOK: false},
		{name: "not base64", header: "Basic !!!", wantOK: false},
		{name: "unpadded base64", header: "Basic cm9vdDo", wantOK: false},
		{name: "bearer", header: "Bearer " + b64("root:"), wantOK: false},
		{name: "scheme only", header: "Basic", wantOK: false},
		{name: "scheme and space only", header: "Basic ", wantOK: false},
		{name: "no space after scheme", header: "Basic" + b64("root:"), wantOK: false},
		{name: "unicode name", header: "Basic " + b64("jürgen:"), wantName: "jürgen", wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name, ok := auth.BasicUser(tt.header)
			if ok != tt.wantOK || name != tt.wantName {
				t.Errorf("BasicUser(%q) = %q, %v; want %q, %v", tt.header, name, ok, tt.wantName, tt.wantOK)
			}
		})
	}
}

func TestWithUser(t *testing.T) {
	t.Parallel()
	if u := auth.UserFrom(context.Background()); u != nil {
		t.Fatalf("UserFrom(empty ctx) = %+v, want nil", u)
	}
	want := &identity.User{Name: "someone", UID: 42}
	ctx := auth.WithUser(context.Background(), want)
	if got := auth.UserFrom(ctx); got != want {
		t.Fatalf("UserFrom = %+v, want %+v", got, want)
	}
	inner := &identity.User{Name: "inner"}
	if got := auth.UserFrom(auth.WithUser(ctx, inner)); got != inner {
		t.Fatalf("UserFrom(nested) = %+v, want the innermost user", got)
	}
}

func FuzzBasicUser(f *testing.F) {
	for _, s := range []string{"", "Basic cm9vdDo=", "basic Og==", "Basic !!", "Bearer x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		name, ok := auth.BasicUser(header)
		if !ok && name != "" {
			t.Fatalf("BasicUser(%q) = %q, false: a name without ok", header, name)
		}
		if ok && strings.Contains(name, ":") {
			t.Fatalf("BasicUser(%q) = %q: the name holds a colon", header, name)
		}
	})
}
