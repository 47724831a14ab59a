// Command rpclat measures the round-trip latency of one NFS procedure, one call at
// a time, with the snfs Go client: calls per second and the p50/p90/p99 latency.
// Run it against snfs and a peer server (ganesha) to compare them call by call.
//
//	rpclat -addr 127.0.0.1:2049 [-mount 127.0.0.1:20048] -export /srv/x -op getattr
//
// ops: null, getattr, lookup, access, setattr (mode), create and remove (a name
// per call), commit, write (-size bytes, UNSTABLE). All but null work on a file
// "rpclat" in the export, created first. mkdir and rmdir each time their own call
// in a loop that makes a directory and removes it again (as nfsmeta dirs does);
// newwrite times a FILE_SYNC write of -size bytes to a file just created (as the
// Linux client flushes a small file on close).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"snfs/client"
	"snfs/nfs3"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:2049", "NFS server")
	export := flag.String("export", "", "export")
	maddr := flag.String("mount", "", "mount addr")
	op := flag.String("op", "null", "null|getattr|lookup|access|setattr|create|remove|mkdir|rmdir|newwrite|commit|write")
	count := flag.Int("count", 20000, "calls")
	size := flag.Int("size", 8192, "write size")
	flag.Parse()
	ctx := context.Background()
	if *maddr == "" {
		*maddr = *addr
	}
	m, err := client.DialMount(ctx, "tcp", *maddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mr, err := m.Mnt(ctx, *export)
	m.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c, err := client.DialNFS(ctx, "tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fh := mr.FH
	buf := make([]byte, *size)
	if *op != "null" {
		mode := uint32(0o644)
		cr, _ := c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: mr.FH, Name: "rpclat"}, Mode: nfs3.Unchecked, Attr: nfs3.Sattr{Mode: &mode, Size: new(uint64)}})
		fh = cr.Object
	}
	lat := make([]time.Duration, *count)
	start := time.Now()
	for i := range lat {
		t0 := time.Now()
		switch *op {
		case "null":
			err = c.Null(ctx)
		case "getattr":
			_, err = c.Getattr(ctx, fh)
		case "setattr":
			m := uint32(0o600 + i%2)
			_, err = c.Setattr(ctx, &nfs3.SetattrArgs{Object: fh, New: nfs3.Sattr{Mode: &m}})
		case "create":
			_, err = c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: mr.FH, Name: fmt.Sprint("c", i)}, Mode: nfs3.Unchecked})
		case "remove":
			_, err = c.Remove(ctx, mr.FH, fmt.Sprint("c", i))
		case "mkdir":
			_, err = c.Mkdir(ctx, mr.FH, fmt.Sprint("d", i), nfs3.Sattr{})
			lat[i] = time.Since(t0)
			if err == nil {
				_, err = c.Rmdir(ctx, mr.FH, fmt.Sprint("d", i))
			}
		case "rmdir":
			_, err = c.Mkdir(ctx, mr.FH, fmt.Sprint("d", i), nfs3.Sattr{})
			t0 = time.Now()
			if err == nil {
				_, err = c.Rmdir(ctx, mr.FH, fmt.Sprint("d", i))
			}
		case "newwrite":
			var cr *nfs3.CreateRes
			cr, err = c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: mr.FH, Name: fmt.Sprint("w", i)}, Mode: nfs3.Unchecked})
			t0 = time.Now()
			if err == nil {
				_, err = c.Write(ctx, cr.Object, 0, buf, nfs3.FileSync)
			}
		case "lookup":
			_, err = c.Lookup(ctx, mr.FH, "rpclat")
		case "access":
			_, err = c.Access(ctx, fh, 0x3f)
		case "commit":
			_, err = c.Commit(ctx, fh, 0, 0)
		case "write":
			_, err = c.Write(ctx, fh, uint64(i%1024)*uint64(*size), buf, nfs3.Unstable)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if *op != "mkdir" {
			lat[i] = time.Since(t0)
		}
	}
	el := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("op=%s calls/s=%.0f p50=%v p90=%v p99=%v\n", *op, float64(*count)/el.Seconds(), lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)*99/100])
}
