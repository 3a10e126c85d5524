package codehttp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// ascii reports whether b is one line of ASCII (what the JS SDK needs of
// the /execute stream).
func ascii(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf || c == '\n' || c == '\r' {
			return false
		}
	}
	return true
}

// FuzzAppendString: any text the code prints (or names an error with) is
// written as one ASCII-only JSON string that reads back as the text, each
// byte that is not UTF-8 read as U+FFFD.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"plain", "q\"b\\s/", "\n\r\t\b\f\x00\x1f\x7f", "é漢😀", "\u2028\ufeff", "bad\xffbyte", "\xed\xa0\x80 surrogate", "\xf4\x90\x80\x80", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendString(nil, s)
		if !ascii(b) || bytes.ContainsFunc(b, func(r rune) bool { return r < 0x20 }) {
			t.Fatalf("appendString(%q) = %q: not one ASCII line, or a control character unescaped", s, b)
		}
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("appendString(%q) = %s: %v", s, b, err)
		}
		var want strings.Builder
		for _, r := range s { // U+FFFD for each byte that is not UTF-8
			want.WriteRune(r)
		}
		if back != want.String() {
			t.Fatalf("appendString(%q) = %s reads back as %q", s, b, back)
		}
	})
}

// FuzzAppendRaw: any raw JSON value a kernel gives (a result's MIME data)
// is written on one ASCII-only line; valid JSON stays valid and reads
// back the same.
func FuzzAppendRaw(f *testing.F) {
	for _, s := range []string{
		"{\"a\": [0.0, null, \"é😀\"],\n \"b\": 1e3}",
		`"<img src=\"x\">\u2028"`,
		"[\r\n1,\r\n2]",
		"\"bad\xff\xfe\"",
		"{\"text/plain\": \"line\\nbreak\"}",
		"not json\n\xff",
		"123456789012345678901234567890",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b := appendRaw(nil, raw)
		if !ascii(b) {
			t.Fatalf("appendRaw(%q) = %q: not one ASCII line", raw, b)
		}
		if !json.Valid(raw) {
			return
		}
		var want, got any
		dec := func(b []byte, v *any) error {
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber()
			return d.Decode(v)
		}
		if err := dec(raw, &want); err != nil {
			t.Fatal(err)
		}
		if err := dec(b, &got); err != nil || !json.Valid(b) || !reflect.DeepEqual(got, want) {
			t.Fatalf("appendRaw(%q) = %q reads back as %v, %v; want %v", raw, b, got, err, want)
		}
	})
}

// FuzzExecuteBody: any body of POST /execute is read as execute reads it
// (readObject, then its fields with stringField and envField) without a
// panic: an object, or an answer of 400, 413 or 422 with FastAPI's
// validation shape; a field read as a string is the JSON string there,
// and a problem names what was wrong; the answer to the problems found
// is 422 with a JSON body.
func FuzzExecuteBody(f *testing.F) {
	for _, s := range []string{
		`{"code": "print(1)", "language": "python", "context_id": "c1", "env_vars": {"A": "1"}}`,
		`{"code": null, "language": 3, "env_vars": {"A": 1, "B": null, "C": "ok"}}`,
		`{"code": "x", "env_vars": []}`,
		`{"code": "x", "env_vars": {"k\r\nX-Injected: 1": 2}}`,
		`{"code": "\ud800\udc00\ud800", "code": "twice"}`,
		`null`, `[]`, `"s"`, ``, `   `, `{`, `{"code": "x"} trailing`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/execute", bytes.NewReader(body))
		fields, ok := readObject(w, r)
		if !ok {
			switch w.Code {
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			case http.StatusUnprocessableEntity:
				var v struct{ Detail []struct{ Type, Msg string } }
				if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || len(v.Detail) == 0 {
					t.Fatalf("422 %q: %v", w.Body, err)
				}
			default:
				t.Fatalf("readObject(%q): %d %s", body, w.Code, w.Body)
			}
			return
		}
		if len(bytes.TrimSpace(body)) != 0 && fields == nil {
			t.Fatalf("readObject(%q): no fields", body)
		}
		var problems []fieldError
		for _, name := range []string{"code", "context_id", "language"} {
			v, present, p := stringField(fields, name)
			problems = append(problems, p...)
			var want string
			switch err := json.Unmarshal(fields[name], &want); {
			case !present && (fields[name] != nil && string(fields[name]) != "null"):
				t.Fatalf("%s %s: absent", name, fields[name])
			case len(p) > 0 && err == nil:
				t.Fatalf("%s %s: a string, refused", name, fields[name])
			case present && len(p) == 0 && v != want:
				t.Fatalf("%s %s: read as %q", name, fields[name], v)
			}
		}
		env, p := envField(fields, "env_vars")
		problems = append(problems, p...)
		for k, v := range env {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				t.Fatalf("env_vars %s: %q=%q", fields["env_vars"], k, v)
			}
		}
		for _, p := range problems {
			if len(p.loc) < 2 || p.loc[0] != "body" || p.typ == "" || p.msg == "" {
				t.Fatalf("problem %+v", p)
			}
		}
		if len(problems) == 0 {
			return
		}
		w = httptest.NewRecorder()
		writeValidation(w, r, problems)
		var v struct{ Detail []struct{ Loc []string } }
		if w.Code != http.StatusUnprocessableEntity || json.Unmarshal(w.Body.Bytes(), &v) != nil || len(v.Detail) != len(problems) {
			t.Fatalf("validation answer %d %q for %+v", w.Code, w.Body, problems)
		}
	})
}
