package interpreter

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
)

// Result is a rich output of an execution: a display_data (IsMain false),
// or the cell's value, an execute_result (IsMain true). Data is the
// kernel's MIME bundle with every value kept as raw JSON: a chart's 0.0
// must stay 0.0 and its nulls must stay.
type Result struct {
	IsMain bool                       `json:"is_main"`
	Data   map[string]json.RawMessage `json:"data"`
}

// Field is one field of a result on the E2B wire.
type Field struct {
	Name  string          // "text", "png", ...; a MIME type in Extra
	Value json.RawMessage // raw JSON
}

// resultFields maps MIME types to E2B result fields, in the order the E2B
// server writes them (docs/wire.md, "Result fields").
var resultFields = []struct{ mime, field string }{
	{"text/plain", "text"},
	{"text/html", "html"},
	{"text/markdown", "markdown"},
	{"image/svg+xml", "svg"},
	{"image/png", "png"},
	{"image/jpeg", "jpeg"},
	{"application/pdf", "pdf"},
	{"text/latex", "latex"},
	{"application/json", "json"},
	{"application/javascript", "javascript"},
	{"e2b/data", "data"},
	{"e2b/chart", "chart"},
}

var knownMIME = func() map[string]bool {
	m := make(map[string]bool, len(resultFields))
	for _, f := range resultFields {
		m[f.mime] = true
	}
	return m
}()

// Fields maps the bundle as E2B's server does (docs/wire.md, "Result
// fields"): the known MIME types become named fields, in the server's order;
// every other type goes to extra, keyed by the MIME type, sorted. text/plain
// loses one outer pair of matching quotes (a string's repr, such as
// '/home/user', shows as /home/user); everything else is passed through
// untouched.
func (r *Result) Fields() (fields, extra []Field) {
	for _, f := range resultFields {
		v, ok := r.Data[f.mime]
		if !ok {
			continue
		}
		if f.field == "text" {
			v = unquoteText(v)
		}
		fields = append(fields, Field{Name: f.field, Value: v})
	}
	for mime, v := range r.Data {
		if !knownMIME[mime] {
			extra = append(extra, Field{Name: mime, Value: v})
		}
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i].Name < extra[j].Name })
	return fields, extra
}

// unquoteText strips one outer pair of ' or " from a text/plain string.
func unquoteText(raw json.RawMessage) json.RawMessage {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return raw // not a string: pass it through
	}
	if len(s) < 2 || (s[0] != '\'' && s[0] != '"') || s[len(s)-1] != s[0] {
		return raw
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(s[1:len(s)-1]) != nil {
		return raw
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Text is the text/plain value as the HTTP API shows it (one outer pair of
// quotes removed), decoded; Jupyter may give it as a list of lines. ok is
// false when the bundle has no text/plain.
func (r *Result) Text() (text string, ok bool) {
	raw, ok := r.Data["text/plain"]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(unquoteText(raw), &s) == nil {
		return s, true
	}
	var lines []string
	if json.Unmarshal(raw, &lines) == nil {
		return strings.Join(lines, ""), true
	}
	return string(raw), true
}
