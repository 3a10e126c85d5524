package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/envd-dev/envd/internal/filesystem/fsconnect"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/server"
)

// maxComposeBody bounds POST /files/compose's JSON body.
const maxComposeBody = 4 << 20

// composeRequest is POST /files/compose's body.
type composeRequest struct {
	SourcePaths []string `json:"source_paths"`
	Destination string   `json:"destination"`
	Username    string   `json:"username"`
}

// compose serves POST /files/compose: the sources, in order, concatenated
// into the destination inside the kernel, the sources removed on success;
// 200 with the destination's entry (the filesystem service's EntryInfo in
// its JSON form). Paths resolve as /files paths do (relative to the home).
// 400 bad input, 401 unknown user, 403 a path the user may not use, 404 a
// missing source, 507 a full disk (the destination unchanged, the sources
// kept).
func (a *API) compose(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxComposeBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			server.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxComposeBody))
			return
		}
		server.WriteError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return
	}
	var req composeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		server.WriteError(w, http.StatusBadRequest, "the body must be a JSON object with source_paths, destination and username: "+err.Error())
		return
	}
	switch {
	case len(req.SourcePaths) == 0:
		server.WriteError(w, http.StatusBadRequest, "source_paths is empty: name the parts to compose, in order")
		return
	case req.Destination == "":
		server.WriteError(w, http.StatusBadRequest, "destination is empty")
		return
	}
	name := req.Username
	if name == "" {
		name = a.o.Defaults.UserName()
	}
	u, err := identity.Lookup(name)
	if err != nil {
		server.WriteError(w, http.StatusUnauthorized, fmt.Sprintf("error looking up user '%s': %v", name, err))
		return
	}
	resolve := func(field, p string) (string, bool) {
		abs, err := u.Resolve(p, "")
		if err != nil || p == "" {
			msg := fmt.Sprintf("%s: empty path", field)
			if err != nil {
				msg = fmt.Sprintf("%s: %v", field, err)
			}
			server.WriteError(w, http.StatusBadRequest, msg)
			return "", false
		}
		return abs, true
	}
	dst, ok := resolve("destination", req.Destination)
	if !ok {
		return
	}
	srcs := make([]string, len(req.SourcePaths))
	for i, p := range req.SourcePaths {
		if srcs[i], ok = resolve(fmt.Sprintf("source_paths[%d]", i), p); !ok {
			return
		}
	}
	e, err := a.o.Files.Compose(u, srcs, dst)
	if err != nil {
		writeErr(w, err)
		return
	}
	out, err := protojson.Marshal(fsconnect.EntryInfo(e))
	if err != nil {
		server.WriteError(w, http.StatusInternalServerError, "encode entry: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}
