package startup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/jupyter/startup"
	"github.com/envd-dev/envd/internal/testutil"
)

const python = startup.DefaultPython

type cell struct {
	Code           string   `json:"code"`
	Silent         bool     `json:"silent,omitempty"`
	Timeout        float64  `json:"timeout,omitempty"`
	InterruptAfter *float64 `json:"interrupt_after,omitempty"`
	// TouchOnStream is a file the driver creates once the cell's first
	// stream message reached it: code waiting for it proves its earlier
	// output was streamed, with no clock involved.
	TouchOnStream string `json:"touch_on_stream,omitempty"`
	// TouchOnStreams are files the driver creates one by one, the n-th
	// once the cell's n-th stream message reached it.
	TouchOnStreams []string `json:"touch_on_streams,omitempty"`
}

type message struct {
	MsgType string          `json:"msg_type"`
	Content json.RawMessage `json:"content"`
	T       float64         `json:"t"`
	Late    bool            `json:"late"` // arrived after status idle
}

type cellResult struct {
	Reply    map[string]any `json:"reply"`
	Messages []message      `json:"messages"`
	Error    string         `json:"error"`
}

type kernelError struct {
	Ename     string   `json:"ename"`
	Evalue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

type stream struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// streams returns the stream messages of the cell in order.
func (r cellResult) streams(t *testing.T) []stream {
	t.Helper()
	var out []stream
	for _, m := range r.Messages {
		if m.MsgType != "stream" {
			continue
		}
		var s stream
		if err := json.Unmarshal(m.Content, &s); err != nil {
			t.Fatalf("decode stream: %v", err)
		}
		out = append(out, s)
	}
	return out
}

func (r cellResult) stdout(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, s := range r.streams(t) {
		if s.Name == "stdout" {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

func (r cellResult) stderr(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, s := range r.streams(t) {
		if s.Name == "stderr" {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

// errors returns the iopub error messages.
func (r cellResult) errors(t *testing.T) []kernelError {
	t.Helper()
	var out []kernelError
	for _, m := range r.Messages {
		if m.MsgType != "error" {
			continue
		}
		var e kernelError
		if err := json.Unmarshal(m.Content, &e); err != nil {
			t.Fatalf("decode error: %v", err)
		}
		out = append(out, e)
	}
	return out
}

// bundle is one display_data / execute_result: MIME type -> raw JSON value.
type bundle struct {
	MsgType string
	Data    map[string]json.RawMessage
}

func (r cellResult) results(t *testing.T) []bundle {
	t.Helper()
	var out []bundle
	for _, m := range r.Messages {
		if m.MsgType != "display_data" && m.MsgType != "execute_result" {
			continue
		}
		var c struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(m.Content, &c); err != nil {
			t.Fatalf("decode %s: %v", m.MsgType, err)
		}
		out = append(out, bundle{MsgType: m.MsgType, Data: c.Data})
	}
	return out
}

func (r cellResult) status() string {
	s, _ := r.Reply["status"].(string)
	return s
}

// mustOK fails unless the cell finished with status ok and no iopub error.
func (r cellResult) mustOK(t *testing.T, what string) {
	t.Helper()
	if r.Error != "" {
		t.Fatalf("%s: driver: %s (messages: %+v)", what, r.Error, r.Messages)
	}
	if r.status() != "ok" {
		t.Fatalf("%s: reply %v; errors %+v; stdout %q", what, r.Reply, r.errors(t), r.stdout(t))
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if installDir != "" {
		os.RemoveAll(installDir)
	}
	os.Exit(code)
}

var (
	installMu  sync.Mutex
	installDir string
	installed  startup.Layout
)

// layout installs the files once per test binary into a temp dir.
func layout(t *testing.T) startup.Layout {
	t.Helper()
	installMu.Lock()
	defer installMu.Unlock()
	if installDir == "" {
		dir, err := os.MkdirTemp("", "envd-startup-test-")
		if err != nil {
			t.Fatal(err)
		}
		l, err := startup.Install(dir)
		if err != nil {
			t.Fatalf("Install: %v", err)
		}
		installDir, installed = dir, l
	}
	return installed
}

// runKernel starts kernel (a kernelspec name) in a fresh process with the
// layout's environment plus env, runs cells in order and returns their
// results.
func runKernel(t *testing.T, kernel, cwd string, env []string, cells []cell) []cellResult {
	t.Helper()
	return runKernelGrace(t, kernel, cwd, env, cells, 0)
}

// runKernelGrace is runKernel, also collecting the cell's messages that
// arrive up to grace seconds after its status idle.
func runKernelGrace(t *testing.T, kernel, cwd string, env []string, cells []cell, grace float64) []cellResult {
	t.Helper()
	testutil.RequireJupyter(t)
	l := layout(t)
	req, err := json.Marshal(map[string]any{"kernel": kernel, "cwd": cwd, "cells": cells, "grace": grace})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	driver, err := filepath.Abs(filepath.Join("testdata", "kernel_driver.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, python, driver)
	cmd.Env = append(l.Environ(os.Environ()), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = bytes.NewReader(req)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kernel driver (%s): %v\nstderr:\n%s\nstdout:\n%s", kernel, err, stderr.String(), stdout.String())
	}
	var out struct {
		Cells []cellResult `json:"cells"`
		Fatal string       `json:"fatal"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("decode driver output: %v\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if out.Fatal != "" {
		t.Fatalf("kernel driver: %s\n%s", out.Fatal, testutil.InstallHint)
	}
	if len(out.Cells) != len(cells) {
		t.Fatalf("driver returned %d cells, want %d", len(out.Cells), len(cells))
	}
	if stderr.Len() > 0 {
		// The kernel's own log (a JVM that would not start, a traceback):
		// shown when a cell's check fails, or with -v.
		log := stderr.String()
		if testing.Verbose() {
			t.Logf("driver stderr (%s):\n%s", kernel, log)
		} else {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("driver stderr (%s):\n%s", kernel, log)
				}
			})
		}
	}
	return out.Cells
}

// kernelNames lists the kernelspecs visible with the layout's environment
// (plus env).
func kernelNames(t *testing.T, env []string) map[string]bool {
	t.Helper()
	testutil.RequireJupyter(t)
	l := layout(t)
	driver, _ := filepath.Abs(filepath.Join("testdata", "kernel_driver.py"))
	cmd := exec.Command(python, driver)
	cmd.Env = append(l.Environ(os.Environ()), env...)
	cmd.Stdin = strings.NewReader(`{"list": true}`)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("list kernels: %v", err)
	}
	var res struct {
		Kernels []string `json:"kernels"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("decode kernel list: %v: %s", err, out)
	}
	names := map[string]bool{}
	for _, k := range res.Kernels {
		names[k] = true
	}
	return names
}

func ptr(s string) *string { return &s }

func fptr(f float64) *float64 { return &f }

// tricky are env values that break naive code interpolation.
var tricky = map[string]string{
	"ENVD_T_QUOTES":  `it's "quoted" \ back\slash \n not-a-newline $HOME ` + "`id` $(id) ${X} '; rm -rf / #",
	"ENVD_T_NEWLINE": "line1\nline2\r\nline3\ttab\x01ctl\x7fdel",
	"ENVD_T_UNICODE": "é 漢字 😀 \u2028sep\u2029 \u0085nel \ufeffbom",
	"ENVD_T_EMPTY":   "",
}
