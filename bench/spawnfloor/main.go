// Command spawnfloor is the least a server can do for the e2b SDK's
// commands.run: it answers Connect's process.Process/Start (JSON, server
// streaming) by starting the requested command with os/exec, as one fixed
// user, in one fixed directory, with its own environment, and sends the
// start event, then the end event once the command exited. No cgroups, no
// output relayed, no checks, no auth, no other RPC.
//
// bench/sdk-commands.mjs times commands.run('true') against it beside envd
// and beside a direct spawn: what is left between this floor and the direct
// spawn is the SDK's and fetch's cost plus a bare Go spawn's, not envd's.
//
// It listens on 127.0.0.1 (a free port unless -addr says otherwise), prints
// its base URL on one line once it accepts connections, and serves until
// killed. A baseline, never a server to run.
//
//	spawnfloor -uid N -gid N -dir D [-addr 127.0.0.1:0]
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "`host:port` to listen on")
	uid := flag.Int("uid", os.Getuid(), "user id the commands run as")
	gid := flag.Int("gid", os.Getgid(), "group id the commands run as")
	dir := flag.String("dir", "/", "directory the commands run in")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spawnfloor:", err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	cred := &syscall.Credential{Uid: uint32(*uid), Gid: uint32(*gid)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /process.Process/Start", func(w http.ResponseWriter, r *http.Request) {
		start(w, r, cred, *dir)
	})
	err = http.Serve(ln, mux)
	fmt.Fprintln(os.Stderr, "spawnfloor:", err)
	os.Exit(1)
}

// start runs one Start request: a Connect envelope (5 bytes: flags, length)
// holding {"process":{"cmd":...,"args":[...]}}.
func start(w http.ResponseWriter, r *http.Request, cred *syscall.Credential, dir string) {
	var hdr [5]byte
	if _, err := io.ReadFull(r.Body, hdr[:]); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req struct {
		Process struct {
			Cmd  string   `json:"cmd"`
			Args []string `json:"args"`
		} `json:"process"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, int64(binary.BigEndian.Uint32(hdr[1:])))).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := exec.Command(req.Process.Cmd, req.Process.Args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	w.Header().Set("Content-Type", "application/connect+json")
	if err := cmd.Start(); err != nil {
		w.WriteHeader(http.StatusOK)
		send(w, 2, map[string]any{"error": map[string]string{"code": "internal", "message": err.Error()}})
		return
	}
	w.WriteHeader(http.StatusOK)
	send(w, 0, map[string]any{"event": map[string]any{"start": map[string]int{"pid": cmd.Process.Pid}}})
	err := cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	send(w, 0, map[string]any{"event": map[string]any{"end": map[string]any{"exitCode": code, "exited": code >= 0, "status": cmd.ProcessState.String()}}})
	send(w, 2, map[string]any{})
}

// send writes one Connect envelope (flags 2: the end of the stream) and
// flushes it.
func send(w http.ResponseWriter, flags byte, msg any) {
	b, _ := json.Marshal(msg)
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	w.Write(hdr[:])
	w.Write(b)
	w.(http.Flusher).Flush()
}
