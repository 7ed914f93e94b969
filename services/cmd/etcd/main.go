// Command etcd is etcd 3.6, built from the version pinned in this module's
// go.mod: the binary the distribution installs on etcd hosts and the one the
// release gate runs as separate processes. Flags are etcd's own.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
