// Package codehttp serves E2B's code-interpreter HTTP API (as the
// @e2b/code-interpreter SDK speaks it) over an interpreter.Engine:
// POST /execute streaming NDJSON (wire.go: ASCII-only lines, as the JS SDK
// needs), GET/POST /contexts, DELETE /contexts/{id}, POST
// /contexts/{id}/restart, the code port's GET /health, and envd's own GET
// /languages (what this sandbox can run; E2B's server has no such route)
// and introspection routes (introspect.go). It uses only
// the engine's exported API, and is the only place where engine errors
// become HTTP statuses (writeErr).
package codehttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/streamloop"
)

// API serves E2B's code-interpreter HTTP API on top of an Engine.
type API struct {
	eng       *interpreter.Engine // nil: code execution is off
	log       *slog.Logger
	keepalive time.Duration
	readyWait time.Duration
	queryWait time.Duration
	clock     quartz.Clock
}

// Options configures New. Zero values are the defaults.
type Options struct {
	// Logger. Zero: slog.Default().
	Logger *slog.Logger
	// Keepalive is the silence after which /execute writes a keepalive
	// line. Zero: 5 s, as E2B's server.
	Keepalive time.Duration
	// ReadyWait bounds how long a request waits for Jupyter (or a
	// language's first kernel) before answering 503. Zero:
	// interpreter.ReadyWait.
	ReadyWait time.Duration
	// QueryWait bounds how long an introspection request waits for a
	// context busy running code before answering 409. Zero:
	// interpreter.QueryWait.
	QueryWait time.Duration
	// Clock drives the keepalives. Zero: the real clock.
	Clock quartz.Clock
}

// New returns the API over eng; a nil eng answers 503 everywhere (envd
// runs with -no-jupyter).
func New(eng *interpreter.Engine, opts Options) *API {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Keepalive <= 0 {
		opts.Keepalive = 5 * time.Second
	}
	if opts.ReadyWait <= 0 {
		opts.ReadyWait = interpreter.ReadyWait
	}
	if opts.QueryWait <= 0 {
		opts.QueryWait = interpreter.QueryWait
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	return &API{eng: eng, log: opts.Logger, keepalive: opts.Keepalive, readyWait: opts.ReadyWait, queryWait: opts.QueryWait,
		clock: opts.Clock}
}

// Routes returns the API's routes, GET /health excepted: on envd's main
// port /health stays envd's own.
func (h *API) Routes() []server.Route {
	return []server.Route{
		{Pattern: "POST /execute", Handler: h.withEngine(h.execute)},
		{Pattern: "GET /contexts", Handler: h.withEngine(h.listContexts)},
		{Pattern: "POST /contexts", Handler: h.withEngine(h.createContext)},
		{Pattern: "DELETE /contexts/{id}", Handler: h.withEngine(h.removeContext)},
		{Pattern: "POST /contexts/{id}/restart", Handler: h.withEngine(h.restartContext)},
		{Pattern: "GET /languages", Handler: h.withEngine(h.listLanguages)},
		{Pattern: "POST /contexts/{id}/complete", Handler: h.withEngine(h.complete)},
		{Pattern: "POST /contexts/{id}/inspect", Handler: h.withEngine(h.inspect)},
		{Pattern: "GET /contexts/{id}/variables", Handler: h.withEngine(h.variables)},
	}
}

// SDKSendsNoToken reports whether the code-interpreter SDKs call a route
// of Routes without the access token: they send X-Access-Token on
// /execute only (E2B's code-interpreter server checks no token at all).
// None of these routes runs code.
func SDKSendsNoToken(pattern string) bool {
	switch pattern {
	case "GET /contexts", "POST /contexts", "DELETE /contexts/{id}", "POST /contexts/{id}/restart", "GET /languages":
		return true
	}
	return false
}

// withEngine answers 503 in place of fn when code execution is off.
func (h *API) withEngine(fn http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.eng == nil {
			writeText(w, http.StatusServiceUnavailable, interpreter.DisabledMessage)
			return
		}
		fn(w, r)
	})
}

// HealthRoute is the code port's GET /health: 200 with the JSON string
// "OK" once code can run, 503 with the reason before.
func (h *API) HealthRoute() server.Route {
	return server.Route{Pattern: "GET /health", Handler: http.HandlerFunc(h.health), Public: true}
}

func (h *API) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if h.eng == nil {
		writeText(w, http.StatusServiceUnavailable, interpreter.DisabledMessage)
		return
	}
	if err := h.eng.Health(); err != nil {
		writeText(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, `"OK"`)
}

// maxBody bounds request bodies (code included).
const maxBody = 64 << 20

func (h *API) execute(w http.ResponseWriter, r *http.Request) {
	fields, ok := readObject(w, r)
	if !ok {
		return
	}
	var req interpreter.ExecuteRequest
	var problems []fieldError
	code, present, p := stringField(fields, "code")
	if string(fields["code"]) == "null" {
		problems = append(problems, fieldError{loc: []string{"body", "code"}, typ: "string_type", msg: "Input should be a valid string"})
	} else if !present {
		problems = append(problems, fieldError{loc: []string{"body", "code"}, typ: "missing", msg: "Field required"})
	}
	problems = append(problems, p...)
	req.Code = code
	req.ContextID, _, p = stringField(fields, "context_id")
	problems = append(problems, p...)
	req.Language, _, p = stringField(fields, "language")
	problems = append(problems, p...)
	req.Env, p = envField(fields, "env_vars")
	problems = append(problems, p...)
	if len(problems) > 0 {
		writeValidation(w, r, problems)
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), h.readyWait)
	x, rd, err := h.eng.Execute(ctx, req)
	cancel()
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left
		}
		h.writeErr(w, r, err, req.ContextID, "Failed to create context")
		return
	}
	defer rd.Close()
	h.stream(w, r, x, rd)
}

// stream writes the execution's events as NDJSON lines until its end, or
// until the client goes away, which interrupts the execution
// (streamloop runs the loop). A reader that fails ends the response
// without an interrupt: the code runs on, as it does for a Connect client.
func (h *API) stream(w http.ResponseWriter, r *http.Request, x *interpreter.Execution, rd *interpreter.Reader) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		x.Interrupt()
		return
	}
	var buf []byte
	var readErr error // the reader's failure, which is not the client's
	err := streamloop.Loop{
		Clock:     h.clock,
		Keepalive: h.keepalive,
		Ready:     rd.Wait,
		Pump: func() (bool, error) {
			evs, err := rd.Read()
			if len(evs) == 0 {
				if errors.Is(err, io.EOF) {
					return false, streamloop.Done // after the end event was sent
				}
				if err != nil {
					readErr = fmt.Errorf("execution %s: read events: %w", x.ID, err)
					return false, readErr
				}
				return false, nil
			}
			buf = buf[:0]
			ended := false
			for _, ev := range evs {
				buf = appendEvent(buf, ev)
				if ev.Kind == interpreter.EventEnd {
					ended = true
					buf = append(buf, `{"type": "end_of_execution"}`+"\n"...)
					break
				}
			}
			if ended {
				// The end and the end of the body in one write.
				server.LastSend(r.Context())
			}
			if err := write(w, rc, buf); err != nil {
				return false, err
			}
			if ended {
				return true, streamloop.Done
			}
			return true, nil
		},
		SendKeepalive: func() error {
			return write(w, rc, []byte(`{"type": "keepalive"}`+"\n"))
		},
	}.Run(r.Context())
	switch {
	case err == nil:
	case readErr != nil && errors.Is(err, readErr):
		h.log.Warn("execute stream ended: its events could not be read", "execution_id", x.ID, "error", err)
	default:
		x.Interrupt() // the client went away, or cannot be written to
	}
}

// write writes b to the client and flushes it.
func write(w http.ResponseWriter, rc *http.ResponseController, b []byte) error {
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	if err := rc.Flush(); err != nil {
		return fmt.Errorf("flush response: %w", err)
	}
	return nil
}

func (h *API) listContexts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.eng.Contexts())
}

// listLanguages answers a JSON array of interpreter.LanguageInfo.
func (h *API) listLanguages(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.readyWait)
	defer cancel()
	langs, err := h.eng.Languages(ctx)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left
		}
		h.writeErr(w, r, err, "", "Failed to list languages")
		return
	}
	writeJSON(w, http.StatusOK, langs)
}

func (h *API) createContext(w http.ResponseWriter, r *http.Request) {
	fields, ok := readObject(w, r)
	if !ok {
		return
	}
	cwd, _, p1 := stringField(fields, "cwd")
	lang, _, p2 := stringField(fields, "language")
	if problems := append(p1, p2...); len(problems) > 0 {
		writeValidation(w, r, problems)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.readyWait)
	defer cancel()
	c, err := h.eng.CreateContext(ctx, lang, cwd)
	if err != nil {
		h.writeErr(w, r, err, "", "Failed to create context")
		return
	}
	writeJSON(w, http.StatusOK, c.Info())
}

func (h *API) removeContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.eng.RemoveContext(r.Context(), id); err != nil {
		h.writeErr(w, r, err, id, "Failed to remove context "+id)
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

func (h *API) restartContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := h.eng.RestartContext(r.Context(), id); err != nil {
		h.writeErr(w, r, err, id, "Failed to restart context "+id)
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

// writeErr maps engine errors to statuses (text bodies, as E2B's server),
// in this one place.
func (h *API) writeErr(w http.ResponseWriter, r *http.Request, err error, id, what string) {
	switch {
	case errors.Is(err, interpreter.ErrContextNotFound):
		writeReason(w, r, http.StatusNotFound, "Context "+id+" not found")
	case errors.Is(err, interpreter.ErrContextAndLanguage):
		writeReason(w, r, http.StatusBadRequest, "Only one of context_id or language can be provided")
	case errors.Is(err, interpreter.ErrUnsupportedLanguage), errors.Is(err, interpreter.ErrBadCwd),
		errors.Is(err, interpreter.ErrBadEnv):
		writeReason(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, interpreter.ErrBadQuery):
		writeReason(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, interpreter.ErrBusy):
		writeReason(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, interpreter.ErrNotSupported):
		writeReason(w, r, http.StatusNotImplemented, err.Error())
	case errors.Is(err, interpreter.ErrNotReady), errors.Is(err, interpreter.ErrClosed),
		errors.Is(err, interpreter.ErrKernelUnavailable):
		writeReason(w, r, http.StatusServiceUnavailable, err.Error())
	default:
		h.log.Warn("code request failed", "op", what, "error", err)
		writeReason(w, r, http.StatusInternalServerError, what+": "+err.Error())
	}
}

// writeReason is writeText with msg also as the HTTP/1 reason phrase: the
// code-interpreter SDK shows only the status line of an error answer.
func writeReason(w http.ResponseWriter, r *http.Request, status int, msg string) {
	server.WriteReason(w, r, status, "text/plain; charset=utf-8", []byte(msg), msg)
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeText(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// fieldError is one request validation problem, shaped like FastAPI's.
type fieldError struct {
	loc []string
	typ string
	msg string
}

// writeValidation answers 422 with FastAPI's body shape:
// {"detail": [{"type", "loc", "msg"}]}.
func writeValidation(w http.ResponseWriter, r *http.Request, problems []fieldError) {
	type detail struct {
		Type string   `json:"type"`
		Loc  []string `json:"loc"`
		Msg  string   `json:"msg"`
	}
	out := struct {
		Detail []detail `json:"detail"`
	}{}
	for _, p := range problems {
		out.Detail = append(out.Detail, detail{Type: p.typ, Loc: p.loc, Msg: p.msg})
	}
	b, err := json.Marshal(out)
	if err != nil {
		writeText(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	// The phrase names the first problem, as a person reads it.
	p := problems[0]
	server.WriteReason(w, r, http.StatusUnprocessableEntity, "application/json", b,
		"invalid request: "+strings.Join(p.loc, ".")+": "+p.msg)
}

// readObject reads a JSON object body; an empty body is {}. On a problem
// it answers 422 (or 413) and returns false.
func readObject(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeText(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxBody))
			return nil, false
		}
		writeText(w, http.StatusBadRequest, "read request body: "+err.Error())
		return nil, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return map[string]json.RawMessage{}, true
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		var syn *json.SyntaxError
		msg := "JSON decode error: " + err.Error()
		typ := "json_invalid"
		loc := []string{"body"}
		if errors.As(err, &syn) {
			loc = append(loc, strconv.FormatInt(syn.Offset, 10))
		} else if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			typ, msg = "model_attributes_type", "Input should be a valid dictionary or object to extract fields from"
		}
		writeValidation(w, r, []fieldError{{loc: loc, typ: typ, msg: msg}})
		return nil, false
	}
	if fields == nil { // the body was null
		writeValidation(w, r, []fieldError{{loc: []string{"body"}, typ: "model_attributes_type",
			msg: "Input should be a valid dictionary or object to extract fields from"}})
		return nil, false
	}
	return fields, true
}

// stringField reads an optional string field; null counts as absent.
func stringField(fields map[string]json.RawMessage, name string) (value string, present bool, problems []fieldError) {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &value); err != nil {
		return "", true, []fieldError{{loc: []string{"body", name}, typ: "string_type", msg: "Input should be a valid string"}}
	}
	return value, true, nil
}

// envField reads an optional {string: string} field; null counts as absent.
func envField(fields map[string]json.RawMessage, name string) (map[string]string, []fieldError) {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, []fieldError{{loc: []string{"body", name}, typ: "dict_type", msg: "Input should be a valid dictionary"}}
	}
	out := make(map[string]string, len(obj))
	var problems []fieldError
	for k, v := range obj {
		var s string
		if err := json.Unmarshal(v, &s); err != nil || string(v) == "null" {
			problems = append(problems, fieldError{loc: []string{"body", name, k}, typ: "string_type", msg: "Input should be a valid string"})
			continue
		}
		out[k] = s
	}
	return out, problems
}
