// Command etcd is etcd's own server entry point (go.etcd.io/etcd/server/v3/etcdmain), built here
// because the etcd repository's root main package is not a module the registries serve on its own.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
