//go:build !unix

package profile

import "os"

// Without Unix owners and modes (Windows reports 0666 and 0777 for
// everything), the profile search checks nothing of them.
func ownedByCaller(os.FileInfo) bool  { return true }
func othersMayWrite(os.FileInfo) bool { return false }
func anyoneMayWrite(os.FileInfo) bool { return false }
