package interpreter

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A late creation's error says what the kernel's processes do: found by
// the connection file in the kernel's command line, children included,
// their CPU counted.
func TestKernelProgress(t *testing.T) {
	t.Parallel()
	id := fmt.Sprintf("progress-test-%d", time.Now().UnixNano())
	// A "kernel" that starts a child burning CPU, as a Java kernel starts
	// its JVMs.
	cmd := exec.Command("sh", "-c", "sh -c 'while :; do :; done' & wait", "kernel", "-f", "/tmp/kernel-"+id+".json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its group: the child too
		_ = cmd.Wait()
	})
	var got string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = kernelProgress(id)
		if strings.Contains(got, "2 process(es)") && !strings.Contains(got, "used 0s of CPU") {
			break
		}
	}
	want := fmt.Sprintf("the kernel's 2 process(es) (pid %d, sh) are alive", cmd.Process.Pid)
	if !strings.HasPrefix(got, want) || strings.Contains(got, "used 0s of CPU") {
		t.Fatalf("kernelProgress = %q, want %q... and some CPU used", got, want)
	}
	if got := kernelProgress("no-such-kernel"); got != "" {
		t.Errorf("kernelProgress of no kernel = %q, want \"\"", got)
	}
	if got := kernelProgress(""); got != "" {
		t.Errorf("kernelProgress(\"\") = %q", got)
	}
}
