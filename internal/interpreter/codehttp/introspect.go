package codehttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/envd-dev/envd/internal/interpreter"
)

// The introspection routes (envd's own; E2B's server has none): JSON in
// and out, errors as text with the status (writeErr): 400 bad input, 404
// unknown context, 409 busy (the context ran code for the whole wait,
// Options.QueryWait), 501 a language without the query, 503 no usable
// kernel. Like /execute, they need the access token on the code port.
//
//	POST /contexts/{id}/complete   {"code", "cursor_pos"?}  -> interpreter.Completion
//	POST /contexts/{id}/inspect    {"code", "cursor_pos"?, "detail_level"?} -> interpreter.Inspection
//	GET  /contexts/{id}/variables  -> interpreter.Variables
//
// cursor_pos counts Unicode code points; absent means the end of code.

// queryBody is the body of complete and inspect.
type queryBody struct {
	Code        *string `json:"code"`
	CursorPos   *int    `json:"cursor_pos"`
	DetailLevel *int    `json:"detail_level"`
}

// readQuery decodes a query body; on a problem it answers 400.
func readQuery(w http.ResponseWriter, r *http.Request) (code string, cursor, detail int, ok bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if _, big := errors.AsType[*http.MaxBytesError](err); big {
			writeText(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxBody))
			return "", 0, 0, false
		}
		writeText(w, http.StatusBadRequest, "read request body: "+err.Error())
		return "", 0, 0, false
	}
	var q queryBody
	if err := json.Unmarshal(body, &q); err != nil {
		writeReason(w, r, http.StatusBadRequest, "invalid request body: want a JSON object "+
			`{"code": string, "cursor_pos": integer (code points; absent: the end of code)}: `+err.Error())
		return "", 0, 0, false
	}
	if q.Code == nil {
		writeReason(w, r, http.StatusBadRequest, "code is missing: give the code and a cursor position in it")
		return "", 0, 0, false
	}
	cursor = interpreter.CursorEnd
	if q.CursorPos != nil {
		if *q.CursorPos < 0 {
			writeReason(w, r, http.StatusBadRequest, fmt.Sprintf("cursor_pos %d is negative", *q.CursorPos))
			return "", 0, 0, false
		}
		cursor = *q.CursorPos
	}
	if q.DetailLevel != nil {
		detail = *q.DetailLevel
	}
	return *q.Code, cursor, detail, true
}

func (h *API) complete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	code, cursor, _, ok := readQuery(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.queryWait)
	defer cancel()
	c, err := h.eng.Complete(ctx, id, code, cursor)
	if err != nil {
		h.writeErr(w, r, err, id, "Failed to complete in context "+id)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (h *API) inspect(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	code, cursor, detail, ok := readQuery(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.queryWait)
	defer cancel()
	in, err := h.eng.Inspect(ctx, id, code, cursor, detail)
	if err != nil {
		h.writeErr(w, r, err, id, "Failed to inspect in context "+id)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

func (h *API) variables(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), h.queryWait)
	defer cancel()
	vars, err := h.eng.Variables(ctx, id)
	if err != nil {
		h.writeErr(w, r, err, id, "Failed to list the variables of context "+id)
		return
	}
	writeJSON(w, http.StatusOK, vars)
}
