//go:build unix

package profile

import (
	"os"
	"strconv"
	"syscall"
)

// ownedByCaller reports whether fi belongs to this process's user, or,
// run as root by sudo, to the user who ran sudo (as git allows).
func ownedByCaller(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	if int(st.Uid) == os.Geteuid() {
		return true
	}
	sudo, err := strconv.Atoi(os.Getenv("SUDO_UID"))
	return os.Geteuid() == 0 && err == nil && int(st.Uid) == sudo
}

// othersMayWrite reports whether someone other than fi's owner may write
// it (group or world write permission).
func othersMayWrite(fi os.FileInfo) bool { return fi.Mode().Perm()&0o022 != 0 }

// anyoneMayWrite reports whether any user may write in directory fi.
func anyoneMayWrite(fi os.FileInfo) bool { return fi.Mode().Perm()&0o002 != 0 }
