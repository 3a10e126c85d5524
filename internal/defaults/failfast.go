package defaults

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Offline, pip and npm retry for long before they say no index answers:
// pip 5 times with a growing pause (8 s), npm twice after 10 s and 60 s
// (70 s). Kernels and commands get their own settings for fewer, shorter
// retries, so that `pip install` and `npm install` from code fail within
// a few seconds when nothing answers:
//
//   - PIP_RETRIES=1 (pip's default: 5). One retry, at once (urllib3 does
//     not pause before the first), still rides out a dropped connection on
//     a flaky network; none would not. PIP_TIMEOUT is left at pip's 15 s:
//     it bounds each wait for the server, a slow but working index's too,
//     and offline costs nothing (a name that does not resolve, a refused
//     connection fail at once).
//   - npm_config_fetch_retries=1, npm_config_fetch_retry_mintimeout=2000,
//     npm_config_fetch_retry_maxtimeout=10000 (npm's: 2, 10 s, 60 s): one
//     retry after 2 s instead of two after 10 s and 60 s. npm's fetch
//     timeout (5 min of silence) is left alone, for the same reason.
//
// They are envd's defaults, under everything the user sets: any variable
// of /init, the host or a request replaces them (they are in the base
// layer of the environment, see Defaults.SetBaseEnv), and a manager's
// settings are left out altogether when one of its configuration files
// that exist when envd starts sets any of them (a variable would
// otherwise win over the file). R (no retries) and apt (its own
// Acquire::Retries, no variable) are left as they are.

// FailFastVars are the settings, by manager.
var FailFastVars = map[string]map[string]string{
	"pip": {"PIP_RETRIES": "1"},
	"npm": {
		"npm_config_fetch_retries":          "1",
		"npm_config_fetch_retry_mintimeout": "2000",
		"npm_config_fetch_retry_maxtimeout": "10000",
	},
}

// failFastKeys match the lines of a manager's configuration files that
// set what FailFastVars sets (pip.conf's retries = N in any section;
// .npmrc's fetch-retries=, fetch-retry-mintimeout=, fetch-retry-maxtimeout=,
// with '-' or '_').
var failFastKeys = map[string]*regexp.Regexp{
	"pip": regexp.MustCompile(`(?i)^\s*retries\s*[=:]`),
	"npm": regexp.MustCompile(`(?i)^\s*fetch[-_]retr(ies|y[-_]mintimeout|y[-_]maxtimeout)\s*=`),
}

// FailFastFiles are the configuration files, by manager, whose settings
// win over FailFastVars.
type FailFastFiles map[string][]string

// FindFailFastFiles lists the configuration files pip and npm read for any
// user of the machine (root's and every home's under /home), as
// FailFastEnv checks them: pip's global files, the virtual environment's
// (venv, "" for none) and each user's; npm's global and built-in npmrc
// (beside the node and npm it finds on envd's PATH) and each user's
// .npmrc.
func FindFailFastFiles(venv string) FailFastFiles {
	homes := []string{"/root"}
	if entries, err := os.ReadDir("/home"); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				homes = append(homes, filepath.Join("/home", e.Name()))
			}
		}
	}
	files := FailFastFiles{"pip": {"/etc/xdg/pip/pip.conf", "/etc/pip.conf"}, "npm": {"/etc/npmrc"}}
	if venv != "" {
		files["pip"] = append(files["pip"], filepath.Join(venv, "pip.conf"))
	}
	if node, err := exec.LookPath("node"); err == nil {
		if real, err := filepath.EvalSymlinks(node); err == nil {
			files["npm"] = append(files["npm"], filepath.Join(filepath.Dir(filepath.Dir(real)), "etc", "npmrc"))
		}
	}
	if npm, err := exec.LookPath("npm"); err == nil {
		if real, err := filepath.EvalSymlinks(npm); err == nil {
			// .../node_modules/npm/bin/npm-cli.js: npm's own npmrc is
			// .../node_modules/npm/npmrc.
			files["npm"] = append(files["npm"], filepath.Join(filepath.Dir(filepath.Dir(real)), "npmrc"))
		}
	}
	for _, h := range homes {
		files["pip"] = append(files["pip"], filepath.Join(h, ".pip", "pip.conf"), filepath.Join(h, ".config", "pip", "pip.conf"))
		files["npm"] = append(files["npm"], filepath.Join(h, ".npmrc"))
	}
	return files
}

// FailFastEnv returns FailFastVars but for the managers whose settings
// one of files sets; kept says, for the log, which were left out and why.
func FailFastEnv(files FailFastFiles) (env map[string]string, kept []string) {
	env = map[string]string{}
	for _, m := range slices.Sorted(maps.Keys(FailFastVars)) {
		if f := setIn(files[m], failFastKeys[m]); f != "" {
			kept = append(kept, fmt.Sprintf("%s: its retries are set in %s", m, f))
			continue
		}
		for k, v := range FailFastVars[m] {
			env[k] = v
		}
	}
	return env, kept
}

// setIn returns the first of files that has a line matching key, or "".
// A file that cannot be read sets nothing.
func setIn(files []string, key *regexp.Regexp) string {
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		found := false
		for sc.Scan() && !found {
			found = key.MatchString(strings.TrimSpace(sc.Text()))
		}
		fh.Close()
		if found {
			return f
		}
	}
	return ""
}
