package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/envd-dev/envd/client"
)

// What --json prints: snake_case names, stable across versions. Lists are
// one JSON array; streams (watch) one object a line.

type fileJSON struct {
	Name          string            `json:"name"`
	Path          string            `json:"path"`
	Type          string            `json:"type"`
	Size          int64             `json:"size"`
	Mode          string            `json:"mode"` // octal permission bits, "0644"
	Permissions   string            `json:"permissions"`
	Owner         string            `json:"owner"`
	Group         string            `json:"group"`
	Modified      time.Time         `json:"modified"`
	SymlinkTarget string            `json:"symlink_target,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

func toFileJSON(f client.FileInfo) fileJSON {
	return fileJSON{
		Name: f.Name, Path: f.Path, Type: f.Type.String(), Size: f.Size,
		Mode: fmt.Sprintf("%04o", uint32(f.Mode.Perm())), Permissions: f.Permissions,
		Owner: f.Owner, Group: f.Group, Modified: f.ModTime.UTC(),
		SymlinkTarget: f.SymlinkTarget, Metadata: f.Metadata,
	}
}

// processJSON leaves the environment out: its values may be secrets.
type processJSON struct {
	PID  uint32   `json:"pid"`
	Tag  string   `json:"tag,omitempty"`
	Cmd  string   `json:"cmd"`
	Args []string `json:"args"`
	Cwd  string   `json:"cwd,omitempty"`
}

func toProcessJSON(p client.ProcessInfo) processJSON {
	args := p.Args
	if args == nil {
		args = []string{}
	}
	return processJSON{PID: p.PID, Tag: p.Tag, Cmd: p.Name, Args: args, Cwd: p.Dir}
}

type watchEventJSON struct {
	Name  string    `json:"name"`
	Op    string    `json:"op"`
	Entry *fileJSON `json:"entry,omitempty"`
}

func toWatchEventJSON(ev client.FileEvent) watchEventJSON {
	out := watchEventJSON{Name: ev.Name, Op: ev.Op.String()}
	if ev.Entry != nil {
		f := toFileJSON(*ev.Entry)
		out.Entry = &f
	}
	return out
}

// metricsJSON has /metrics' own names.
type metricsJSON struct {
	TS         int64   `json:"ts"`
	CPUCount   int     `json:"cpu_count"`
	CPUUsedPct float64 `json:"cpu_used_pct"`
	MemTotal   uint64  `json:"mem_total"`
	MemUsed    uint64  `json:"mem_used"`
	MemCache   uint64  `json:"mem_cache"`
	DiskTotal  uint64  `json:"disk_total"`
	DiskUsed   uint64  `json:"disk_used"`
}

func toMetricsJSON(m *client.Metrics) metricsJSON {
	return metricsJSON{
		TS: m.Time.Unix(), CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPercent,
		MemTotal: m.MemTotal, MemUsed: m.MemUsed, MemCache: m.MemCache,
		DiskTotal: m.DiskTotal, DiskUsed: m.DiskUsed,
	}
}

type healthJSON struct {
	OK        bool    `json:"ok"`
	Target    string  `json:"target"`
	LatencyMS float64 `json:"latency_ms"`
	// Token is accepted (a token was given and envd takes it), none (none
	// was given and envd needs none) or refused (envd refuses the one
	// given, or wants one); TokenError is then envd's reason.
	Token      string `json:"token"`
	TokenError string `json:"token_error,omitempty"`
}

// languageJSON is what languages --json prints for each language.
type languageJSON struct {
	Language              string   `json:"language"`
	KernelName            string   `json:"kernel_name"`
	DisplayName           string   `json:"display_name"`
	Aliases               []string `json:"aliases"`
	DefaultContextID      string   `json:"default_context_id,omitempty"`
	DefaultContextRunning bool     `json:"default_context_running"`
}

func toLanguageJSON(l client.Language) languageJSON {
	aliases := l.Aliases
	if aliases == nil {
		aliases = []string{}
	}
	return languageJSON{
		Language: l.Name, KernelName: l.KernelName, DisplayName: l.DisplayName, Aliases: aliases,
		DefaultContextID: l.DefaultContextID, DefaultContextRunning: l.DefaultContextRunning,
	}
}

// contextJSON is what contexts --json prints for each context.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// printJSON writes v as one line of JSON, with <, > and & as they are
// (tracebacks and text/html results are full of them).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// exec-code --json prints one object a line per event, its kind in "type":
// stdout, stderr, result, error, notice, and end last.

type outputJSON struct {
	Type string    `json:"type"` // stdout or stderr
	Text string    `json:"text"`
	Time time.Time `json:"time,omitzero"`
}

// resultJSON has the result's data as the kernel gave it: each MIME type's
// JSON value (base64 for images).
type resultJSON struct {
	Type         string                     `json:"type"` // result
	IsMainResult bool                       `json:"is_main_result"`
	Text         string                     `json:"text"` // the text/plain form
	Data         map[string]json.RawMessage `json:"data"`
	// Files are the images written by --save-dir.
	Files []string `json:"files,omitempty"`
}

func toResultJSON(r client.Result, files []savedImage) resultJSON {
	out := resultJSON{Type: "result", IsMainResult: r.Main, Text: r.Text, Data: map[string]json.RawMessage{}}
	for k, v := range r.Data {
		if !json.Valid(v) {
			v, _ = json.Marshal(string(v))
		}
		out.Data[k] = v
	}
	for _, f := range files {
		out.Files = append(out.Files, f.path)
	}
	return out
}

// codeErrorJSON is the exception the code raised. Its traceback is as the
// kernel sent it (lines joined without separators, ANSI escapes kept).
type codeErrorJSON struct {
	Type      string `json:"type"` // error
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

type noticeJSON struct {
	Type string    `json:"type"` // notice
	Kind string    `json:"kind"` // kernel_restarted, kernel_replaced, packages_changed
	Text string    `json:"text"`
	Time time.Time `json:"time,omitzero"`
}

func toNoticeJSON(n client.Notice) noticeJSON {
	return noticeJSON{Type: "notice", Kind: snake(n.Kind.String()), Text: n.Text, Time: n.Time}
}

type endJSON struct {
	Type string `json:"type"` // end
	// Reason is ok, error, interrupted, timed_out, kernel_died,
	// context_restarted or server_restarted.
	Reason         string `json:"reason"`
	Message        string `json:"message,omitempty"`
	ExecutionID    string `json:"execution_id"`
	ContextID      string `json:"context_id"`
	ExecutionCount int64  `json:"execution_count"`
}

func toEndJSON(res *client.ExecResult) endJSON {
	return endJSON{
		Type: "end", Reason: snake(res.Reason.String()), Message: res.Message,
		ExecutionID: res.ID, ContextID: res.ContextID, ExecutionCount: res.Count,
	}
}

// snake writes a name of words in snake_case: "timed out" is "timed_out".
func snake(s string) string { return strings.ReplaceAll(s, " ", "_") }

// queuedJSON says the code waits behind another execution of its context.
type queuedJSON struct {
	Type   string `json:"type"` // "queued"
	Behind string `json:"behind_execution_id"`
}

// shellJSON is what shell list --json prints for each session.
type shellJSON struct {
	ID       string    `json:"id"`
	Tag      string    `json:"tag,omitempty"`
	User     string    `json:"user"`
	PID      uint32    `json:"pid"`
	PTY      bool      `json:"pty"`
	Busy     bool      `json:"busy"`
	Commands uint64    `json:"commands"`
	Created  time.Time `json:"created,omitzero"`
}

func toShellJSON(s client.ShellInfo) shellJSON {
	return shellJSON{
		ID: s.ID, Tag: s.Tag, User: s.User, PID: s.PID, PTY: s.PTY, Busy: s.Busy,
		Commands: s.Commands, Created: s.Created.UTC(),
	}
}

// shellStateJSON is what shell state --json prints: the session, and its
// shell's cwd, exported environment and commands.
type shellStateJSON struct {
	shellJSON
	Cwd          string            `json:"cwd"`
	Env          map[string]string `json:"env"`
	Running      *shellCommandJSON `json:"running,omitempty"`
	Queued       int               `json:"queued"`
	LastExitCode int               `json:"last_exit_code"`
}

type shellCommandJSON struct {
	CommandID string    `json:"command_id"`
	Seq       uint64    `json:"seq"`
	Command   string    `json:"command"`
	Started   time.Time `json:"started,omitzero"`
}

func toShellStateJSON(st *client.ShellState) shellStateJSON {
	env := st.Env
	if env == nil {
		env = map[string]string{}
	}
	out := shellStateJSON{
		shellJSON: toShellJSON(st.ShellInfo), Cwd: st.Dir, Env: env,
		Queued: st.Queued, LastExitCode: st.LastExitCode,
	}
	if r := st.Running; r != nil {
		out.Running = &shellCommandJSON{CommandID: r.ID, Seq: r.Seq, Command: r.Command, Started: r.Started.UTC()}
	}
	return out
}
