//go:build unix

package profile

import (
	"os"
	"syscall"
)

// ownedByCaller reports whether fi belongs to this process's user.
func ownedByCaller(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
