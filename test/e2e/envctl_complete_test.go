package e2e_test

import (
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/envd-dev/envd/internal/testutil"
)

// TestEnvctlExecCodeCompletion types Tab at exec-code's prompt on a real
// terminal, against a real envd running Jupyter: one match is inserted,
// several are listed above the prompt, Tab after whitespace indents.
func TestEnvctlExecCodeCompletion(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{jupyter: true})
	cmd := exec.Command(envctlBin(t), "--addr="+e.url, "exec-code")
	cmd.Env = ctlEnv()
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	var screen syncBuffer
	go io.Copy(&screen, tty)
	prompts := 0
	send := func(keys string) {
		t.Helper()
		prompts++
		testutil.Poll(t, fmt.Sprintf("prompt %d", prompts), func() bool { return strings.Count(screen.String(), ">>> ") >= prompts })
		io.WriteString(tty, keys)
	}
	has := func(s string) func() bool { return func() bool { return strings.Contains(screen.String(), s) } }

	send("quite_unique_name = 'completed'; other_one = 1; other_two = 2\n")
	// One match: the line becomes the name, and runs.
	send("print(quite_un\t)\n")
	testutil.Poll(t, "the completed line's output", has("completed\r\n"))
	// Two matches: the common prefix, then the list; the line is kept.
	send("oth\t\t")
	testutil.Poll(t, "the matches listed", has("other_one  other_two"))
	prompts++ // the prompt is drawn again below the list
	testutil.Poll(t, "the prompt below the list", func() bool { return strings.Count(screen.String(), ">>> ") >= prompts })
	io.WriteString(tty, "two + 40\n")
	testutil.Poll(t, "the line after the list", has("42\r\n"))
	// Tab in a block's indentation indents.
	send("for i in range(2):\n")
	testutil.Poll(t, "the block's prompt", has("... "))
	io.WriteString(tty, "\tprint('looped', i)\n\n")
	testutil.Poll(t, "the loop", has("looped 1\r\n"))
	prompts++
	testutil.Poll(t, "the last prompt", func() bool { return strings.Count(screen.String(), ">>> ") >= prompts })
	io.WriteString(tty, "\x04")
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("exit %d; screen:\n%s", code, screen.String())
	}
}
