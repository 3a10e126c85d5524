package packages

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/identity"
)

// TestAptInstallOnlyInstallsTheName: an install request's name reaches
// apt-get as the name of one package to install, never as an action: apt-get
// install reads NAME- as "remove NAME" and, for a name that no package has,
// a name holding '.' or '+' as a regular expression over every package
// name. Both are Debian-name-shaped, so the name rules let them through.
// The planned apt-get is run in simulation (-s): nothing changes on the
// machine.
func TestAptInstallOnlyInstallsTheName(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: apt plans run apt-get as root")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("no apt-get")
	}
	if !haveAptLists() {
		t.Skip("no apt package lists to simulate against")
	}
	root, err := identity.Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	if exec.Command("dpkg-query", "-W", "curl").Run() != nil {
		t.Skip("needs curl installed (a package the simulation can remove)")
	}
	in := New(Options{})
	t.Cleanup(func() { in.Close(context.Background()) })
	for _, c := range []struct {
		name string
		bad  string // in apt-get's simulated output: what the install must not do
	}{
		{"curl-", "Remv curl"},    // install a name: removes curl
		{"python3.1.", "\nInst "}, // installs what the regex matches (python3.11-dbg, ...)
	} {
		p, err := in.planInstall(context.Background(), InstallRequest{Manager: APT, Packages: []Spec{{Name: c.name}}, User: root})
		if errors.Is(err, ErrInvalid) {
			continue // refused before anything runs: fine
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cmds, err := p.commands(nil)
		if err != nil || len(cmds) == 0 {
			t.Fatalf("%s: commands %v, %v", c.name, cmds, err)
		}
		argv := slices.Clone(cmds[len(cmds)-1].argv)
		if len(argv) < 2 || argv[1] != "install" {
			t.Fatalf("%s: not apt-get install: %q", c.name, argv)
		}
		// Simulate: apt-get -s changes nothing.
		sim := append([]string{argv[0], "-s"}, argv[1:]...)
		out, _ := exec.Command(sim[0], sim[1:]...).CombinedOutput()
		if strings.Contains("\n"+string(out), c.bad) {
			t.Errorf("install request for the name %q: apt-get %q would %q:\n%s", c.name, argv[1:], c.bad, lastLines(string(out), 8))
		}
	}
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
