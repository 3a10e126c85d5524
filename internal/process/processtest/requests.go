package processtest

import (
	"fmt"
	"os"
	"sync/atomic"

	pb "github.com/envd-dev/envd/gen/process"
)

// The requests' parts tests build again and again.

// Sh is a ProcessConfig running script with /bin/sh -c; args become $0,
// $1...
func Sh(script string, args ...string) *pb.ProcessConfig {
	return &pb.ProcessConfig{Cmd: "/bin/sh", Args: append([]string{"-c", script}, args...)}
}

// PidSel selects the process pid.
func PidSel(pid uint32) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
}

// TagSel selects the process tagged tag.
func TagSel(tag string) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}
}

// StdinInput is b for a process's stdin.
func StdinInput(b string) *pb.ProcessInput {
	return &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(b)}}
}

// PTYInput is b for a process's terminal.
func PTYInput(b string) *pb.ProcessInput {
	return &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(b)}}
}

// PTYSize is a terminal of cols by rows.
func PTYSize(cols, rows uint32) *pb.PTY {
	return &pb.PTY{Size: &pb.PTY_Size{Cols: cols, Rows: rows}}
}

var tagSeq atomic.Int64

// UniqueTag is a tag no other test of the run uses.
func UniqueTag(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), tagSeq.Add(1))
}

// ClientCase is one way to talk to the service: HTTP version, codec, user.
type ClientCase struct {
	Name string
	Opts ClientOptions
}

// ClientCases crosses h2c and HTTP/1.1, the JSON codec the SDK uses and
// the binary one, and the given users ("" is the default user).
func ClientCases(users ...string) []ClientCase {
	var out []ClientCase
	for _, proto := range []Proto{H2C, HTTP1} {
		for _, codec := range []Codec{JSON, Binary} {
			for _, u := range users {
				name := u
				if name == "" {
					name = "default-user"
				}
				out = append(out, ClientCase{
					Name: fmt.Sprintf("%s/%s/%s", proto, codec, name),
					Opts: ClientOptions{Proto: proto, Codec: codec, User: u},
				})
			}
		}
	}
	return out
}
