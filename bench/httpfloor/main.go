// Command httpfloor is a bare Go net/http server doing envd's file
// transfers the plainest way the standard library allows, for
// bench/files.sh to time curl against it and against envd with the same
// command lines:
//
//	GET  /files?path=P   http.ServeFile of P (sendfile)
//	POST /files?path=P   an application/octet-stream body: io.Copy into P;
//	                     multipart/form-data: r.MultipartReader, the first
//	                     part io.Copy'd into P
//
// It listens on 127.0.0.1 (a free port unless -addr says otherwise), prints
// its base URL on one line once it accepts connections, and serves until
// killed. No auth, no users, no checks: a baseline, never a server to run.
//
//	httpfloor [-addr 127.0.0.1:0]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "`host:port` to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpfloor:", err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /files", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, r.URL.Query().Get("path"))
	})
	mux.HandleFunc("POST /files", upload)
	err = http.Serve(ln, mux)
	fmt.Fprintln(os.Stderr, "httpfloor:", err)
	os.Exit(1)
}

// upload writes the body, or its multipart body's first part, to ?path=.
func upload(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		part, err := mr.NextPart()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer part.Close()
		body = part
	}
	f, err := os.Create(r.URL.Query().Get("path"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, err = io.Copy(f, body)
	err = errors.Join(err, f.Close())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}
