// Package ports watches the sandbox's listening TCP sockets and makes the
// ones bound only to loopback reachable from outside the sandbox.
//
// A Monitor scans the listeners of its network namespace (netlink
// sock_diag, or /proc/net/tcp and tcp6 where sock_diag is missing) about
// once a second, finds the process that holds each one (/proc/PID/fd, a
// bounded walk that only looks for sockets it does not know yet), and, when
// forwarding is on, forwards every non-loopback address of the sandbox's
// interfaces, on the same port, to each listener bound only to loopback:
// in-process, one listener per external address, each accepted connection
// copied both ways to the loopback listener with half-closes passed on. A
// forward stops (its listener and connections closed) when its loopback
// listener goes away. Private listeners (envd's own, its Jupyter server's,
// and its kernels' lines to that server: private.go says which), ports
// that already have a listener on a wildcard or external address, and
// addresses that cannot be bound (taken) are not forwarded; the last are
// reported.
//
// The package knows nothing of the wire: portsconnect serves it as the
// Connect service envd.ports.v1.PortService.
package ports
