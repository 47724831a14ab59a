// Command fuseloop mounts a FUSE loopback of a local directory with go-fuse's
// fs.NewLoopbackRoot: the "FUSE floor" of bench/mountbench.sh, i.e. what any
// go-fuse file system costs over the local disk before it does any work of its
// own. go-fuse passes the loopback's opens through to the backing files (FUSE
// passthrough, on kernels that have it, as this machine's does): its reads
// and writes never reach the daemon. Mount options follow snfs mount (mount/fusefs): mount(2) directly,
// allow_other, 1 MiB reads ahead and writes; go-fuse's default 1 s entry and
// attribute timeouts.
//
// With -durable it is the floor of a FUSE file system whose close(2) makes
// written data durable on the local disk first, as snfs mode's does
// (durable.go).
//
// With -null it serves no directory but an in-memory tree (null.go): the
// floor of the create/close/unlink and mkdir/rmdir loops.
//
// With -cached it is the floor of a FUSE file system that serves everything
// it can from the kernel's caches (as snfs mode does while the server lets
// it cache): 1 h entry and attribute timeouts, and every open keeps the
// kernel's pages of the file (FOPEN_KEEP_CACHE) and of the directory listing
// (FOPEN_CACHE_DIR); the daemon sees only what the kernel cannot avoid
// sending (an OPENDIR per directory read, a GETATTR after a directory's
// atime changed). It is a floor for a tree nobody else changes, not a file
// system: it never invalidates anything.
//
//	fuseloop [-debug] [-cached | -daemon-io | -durable | -null] DIR MOUNTPOINT   # runs until unmounted (umount MOUNTPOINT) or SIGINT/SIGTERM
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	debug := flag.Bool("debug", false, "log every FUSE request")
	cached := flag.Bool("cached", false, "1 h timeouts, kept pages and directory listings (the floor of a caching FUSE file system)")
	daemonIO := flag.Bool("daemon-io", false, "no passthrough: reads and writes come to the daemon (daemonio.go)")
	null := flag.Bool("null", false, "serve an in-memory tree, not DIR, with 1 h timeouts: the floor of the create and mkdir loops (null.go)")
	durableClose := flag.Bool("durable", false, "every close of an open for writing fdatasyncs the file first (durable.go)")
	writeBehind := flag.Duration("write-behind", 5*time.Millisecond, "with -durable: start the disk writes of a write open's dirty pages this often (0: never)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: fuseloop [-debug] [-cached | -daemon-io | -durable | -null] DIR MOUNTPOINT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	root, err := fs.NewLoopbackRoot(flag.Arg(0))
	switch {
	case btoi(*cached)+btoi(*daemonIO)+btoi(*durableClose)+btoi(*null) > 1:
		log.Fatal("fuseloop: -cached, -daemon-io, -durable and -null do not combine")
	case *null:
		root = &nullDir{}
	case *cached:
		root, err = loopbackRoot(flag.Arg(0), func(n *fs.LoopbackNode) fs.InodeEmbedder { return &cachedNode{n} })
	case *daemonIO:
		root, err = loopbackRoot(flag.Arg(0), func(n *fs.LoopbackNode) fs.InodeEmbedder { return &daemonNode{n} })
	case *durableClose:
		root, err = loopbackRoot(flag.Arg(0), func(n *fs.LoopbackNode) fs.InodeEmbedder { return &durableNode{n, *writeBehind} })
	}
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
	if *cached || *null {
		hour := time.Hour
		opts.EntryTimeout, opts.AttrTimeout, opts.NegativeTimeout = &hour, &hour, &hour
	}
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cachedNode is a loopback node whose opens keep the kernel's caches.
type cachedNode struct{ *fs.LoopbackNode }

func (n *cachedNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return fh, fl | fuse.FOPEN_KEEP_CACHE, errno
}

func (n *cachedNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	return fh, fl | fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_CACHE_DIR, errno
}

// loopbackRoot is fs.NewLoopbackRoot with every node made by wrap.
func loopbackRoot(dir string, wrap func(*fs.LoopbackNode) fs.InodeEmbedder) (fs.InodeEmbedder, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return nil, err
	}
	r := &fs.LoopbackRoot{Path: dir, Dev: uint64(st.Dev)}
	r.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return wrap(&fs.LoopbackNode{RootData: r})
	}
	r.RootNode = r.NewNode(r, nil, "", &st)
	return r.RootNode, nil
}
