// Package archtest holds the rules of envd's package layout as a test, in
// the spirit of tailscale's depaware and pkgdoc tests: the layout that
// docs/architecture.md describes is checked on every run of the Go suite
// (and by make lint), not only kept by review.
//
// The rules, each failing with the package and the import that breaks it:
//   - A domain package (internal/process, filesystem, interpreter, jupyter,
//     packages, ports, cgroup, outbuf, reaper, identity; the package itself,
//     not its adapters beside it) imports neither connectrpc.com/connect,
//     anything under gen/, nor internal/server; nor net/http, but for a short
//     allowlist, each entry with its reason.
//   - client/... and cmd/envctl import nothing under internal/, directly or
//     through another package of the module.
//   - Every package but the generated ones under gen/ has a package doc
//     comment ("Package x ...", "Command x ..." for a main package) in a
//     non-test file (a test-only package: in a test file).
//
// Only the imports of non-test files count: a test may import what it
// needs. The package has no code of its own; everything is in its test.
package archtest
