// Command fuseloop mounts a FUSE loopback of a local directory with go-fuse's
// fs.NewLoopbackRoot: the "FUSE floor" of bench/mountbench.sh, i.e. what any
// go-fuse file system costs over the local disk before it does any work of its
// own. Mount options follow snfs mount (mount/fusefs): mount(2) directly,
// allow_other, 1 MiB reads ahead and writes; go-fuse's default 1 s entry and
// attribute timeouts.
//
//	fuseloop [-debug] DIR MOUNTPOINT   # runs until unmounted (umount MOUNTPOINT) or SIGINT/SIGTERM
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	debug := flag.Bool("debug", false, "log every FUSE request")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: fuseloop [-debug] DIR MOUNTPOINT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	root, err := fs.NewLoopbackRoot(flag.Arg(0))
	if err != nil {
		log.Fatalf("fuseloop: %v", err)
	}
	opts := &fs.Options{MountOptions: fuse.MountOptions{
		DirectMount:   true,
		AllowOther:    true,
		FsName:        flag.Arg(0),
		Name:          "fuseloop",
		MaxWrite:      1 << 20,
		MaxReadAhead:  1 << 20,
		DisableXAttrs: true,
		Debug:         *debug,
	}}
	srv, err := fs.Mount(flag.Arg(1), root, opts)
	if err != nil {
		log.Fatalf("fuseloop: mount %s: %v", flag.Arg(1), err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		if err := srv.Unmount(); err != nil {
			log.Printf("fuseloop: unmount: %v", err)
		}
	}()
	srv.Wait()
}
