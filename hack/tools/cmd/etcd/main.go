// Command etcd is the etcd server (go.etcd.io/etcd/server/v3, version pinned
// in ../../go.mod), built from the module proxy so the local cluster harness
// needs no release download.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
