package testutil

import (
	"fmt"
	"syscall"
)

// BecomeUser makes the calling process uid and gid for good, as a shell of
// that user is: supplementary groups, then real, effective and saved gid and
// uid of every thread, after which no capability is left. Tests re-run
// their own binary as root and call it first, to act as sandbox code of an
// unprivileged user.
func BecomeUser(uid, gid int) error {
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	return nil
}
