package main

import (
	"encoding/json"
	"fmt"
	"io"
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
}

// printJSON writes v as one line of JSON.
func printJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
