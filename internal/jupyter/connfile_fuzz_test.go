package jupyter

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzConnectionFile: a kernel's connection file (written by Jupyter in
// its runtime directory, and read back by envd for the direct path,
// readConnectionInfo, and to tell the kernel's channels from the
// workload's ports, connectionPorts), whatever it holds, is read without
// a panic. What readConnectionInfo accepts is a tcp connection to a
// loopback address, on ports that exist, signed with HMAC-SHA256 if at
// all, and reads the same once written back; connectionPorts gives real
// ports only, each a channel's, and both channels readConnectionInfo
// found when their keys are spelt as Jupyter spells them.
func FuzzConnectionFile(f *testing.F) {
	for _, s := range []string{
		`{"shell_port": 50001, "iopub_port": 50002, "stdin_port": 50003, "control_port": 50004, "hb_port": 50005, "ip": "127.0.0.1", "key": "a0436f6c-1916-498b-8eb9-e81ab9368e84", "transport": "tcp", "signature_scheme": "hmac-sha256", "kernel_name": "python3"}`,
		`{"shell_port": 1, "iopub_port": 65535, "ip": "::1", "key": "", "transport": "tcp", "signature_scheme": ""}`,
		`{"shell_port": 0, "iopub_port": 65536, "ip": "127.0.0.1", "transport": "tcp"}`,
		`{"shell_port": 5.5, "iopub_port": -1, "stdin_port": 1e3, "hb_port": "7", "ip": "127.0.0.1", "transport": "tcp"}`,
		`{"shell_port": 50001, "iopub_port": 50002, "ip": "0.0.0.0", "transport": "tcp"}`,
		`{"shell_port": 50001, "iopub_port": 50002, "ip": "127.0.0.1", "transport": "ipc"}`,
		`{"shell_port": 50001, "iopub_port": 50002, "ip": "127.0.0.1", "transport": "tcp", "key": "k", "signature_scheme": "hmac-md5"}`,
		`{"Shell_Port": 50001, "shell_port": 50009, "IOPUB_PORT": 50002, "ip": "::ffff:127.0.0.1", "transport": "tcp"}`,
		`[1,2,3]`, `null`, ``, `{"shell_port":`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	name := filepath.Join(dir, "kernel-fuzz.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
		ports := connectionPorts(name)
		if len(ports) > 5 || slices.Contains(ports, 0) {
			t.Fatalf("connectionPorts(%q) = %v", data, ports)
		}
		ci, err := readConnectionInfo(name)
		if err != nil {
			return
		}
		ip := net.ParseIP(ci.IP)
		switch {
		case ci.Transport != "tcp", ip == nil || !ip.IsLoopback(),
			ci.Key != "" && ci.SignatureScheme != "hmac-sha256",
			ci.ShellPort < 1 || ci.ShellPort > 65535 || ci.IOPubPort < 1 || ci.IOPubPort > 65535:
			t.Fatalf("readConnectionInfo(%q) accepted %+v", data, ci)
		}
		var raw map[string]any
		json.Unmarshal(data[:min(len(data), maxConnectionFile)], &raw)
		for key, port := range map[string]int{"shell_port": ci.ShellPort, "iopub_port": ci.IOPubPort} {
			if raw[key] == float64(port) && !slices.Contains(ports, uint16(port)) {
				t.Fatalf("%s %d: not among the channels' ports %v", key, port, ports)
			}
		}
		again, _ := json.Marshal(ci)
		if err := os.WriteFile(name, again, 0o600); err != nil {
			t.Fatal(err)
		}
		if back, err := readConnectionInfo(name); err != nil || *back != *ci {
			t.Fatalf("%+v written again and read: %+v, %v", ci, back, err)
		}
	})
}
