// Command drcbench measures what saving the replies of non-idempotent calls in
// the state directory (package drcstore) costs: clients each CREATE (guarded)
// and REMOVE files in their own directory of a sync export (-op create), or
// APPEND (UNSTABLE, saving an intent before each write and the reply after
// it) to a file of their own (-op append) or all to one file (-op
// append-shared), against an
// in-process server with saved replies and one with replies in memory only
// (server.Config.VolatileReplies), alternating the two in every repetition,
// and prints the median operations per second of each.
//
//	go run ./bench/drcbench -dir /var/tmp/drcbench -clients 1,8 -ops 400 -reps 5 [-op append]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"snfs/bench/internal/stats"
	"snfs/client"
	"snfs/nfs3"
	"snfs/server"
)

var (
	work    = flag.String("dir", "/var/tmp/drcbench", "work directory (on the disk measured)")
	clients = flag.String("clients", "1,8", "numbers of concurrent clients")
	ops     = flag.Int("ops", 400, "CREATE+REMOVE pairs per client per run")
	reps    = flag.Int("reps", 5, "repetitions (the two servers alternate in each)")
	opts    = flag.String("opts", "rw,no_root_squash", "export options")
	op      = flag.String("op", "create", "create (CREATE+REMOVE pairs), append or append-shared (APPENDs of 100 bytes)")
)

var ctx = context.Background()

func die(f string, a ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", a...)
	os.Exit(1)
}

// run serves a fresh export and returns the operations per second of n clients.
func run(volatile bool, n int) float64 {
	dir := filepath.Join(*work, fmt.Sprintf("v%v-%d", volatile, n))
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	export, state := filepath.Join(dir, "export"), filepath.Join(dir, "state")
	os.MkdirAll(export, 0o777)
	o, err := server.ParseOptions(server.DefaultOptions, *opts)
	if err != nil {
		die("%v", err)
	}
	srv, err := server.New(server.Config{StateDir: state, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		VolatileReplies: volatile, Exports: []server.ExportConfig{{Path: export, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}})
	if err != nil {
		die("server: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die("%v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln, nil) }()
	defer func() {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		srv.Shutdown(c)
		<-done
	}()
	addr := ln.Addr().String()
	m, err := client.DialMount(ctx, "tcp", addr)
	if err != nil {
		die("mount: %v", err)
	}
	mr, err := m.Mnt(ctx, export)
	m.Close()
	if err != nil || mr.Status != 0 {
		die("MNT: %v %v", err, mr.Status)
	}
	type cl struct {
		c   *client.NFS
		dir nfs3.FH
	}
	cls := make([]cl, n)
	for i := range cls {
		c, err := client.DialNFS(ctx, "tcp", addr)
		if err != nil {
			die("dial: %v", err)
		}
		defer c.Close()
		r, err := c.Mkdir(ctx, mr.FH, fmt.Sprintf("c%d", i), nfs3.Sattr{})
		if err != nil || r.Status != nfs3.OK {
			die("MKDIR: %v %v", err, r.Status)
		}
		cls[i] = cl{c, r.Object}
	}
	mode := uint32(0o644)
	if *op != "create" {
		return appends(cls[0].c, mr.FH, n, func(i int) (*client.NFS, nfs3.FH) { return cls[i].c, cls[i].dir })
	}
	var wg sync.WaitGroup
	start := time.Now()
	for _, x := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range *ops {
				name := "f" + strconv.Itoa(j)
				r, err := x.c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: x.dir, Name: name}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
				if err != nil || r.Status != nfs3.OK {
					die("CREATE: %v %v", err, r.Status)
				}
				rm, err := x.c.Remove(ctx, x.dir, name)
				if err != nil || rm.Status != nfs3.OK {
					die("REMOVE: %v %v", err, rm.Status)
				}
			}
		}()
	}
	wg.Wait()
	return float64(2**ops*n) / time.Since(start).Seconds()
}

// appends has n clients APPEND *ops records each, to a file in their own
// directory, or (append-shared) all to one file, and returns APPENDs per
// second.
func appends(c0 *client.NFS, root nfs3.FH, n int, cl func(int) (*client.NFS, nfs3.FH)) float64 {
	mode := uint32(0o644)
	mk := func(c *client.NFS, dir nfs3.FH) nfs3.FH {
		r, err := c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: "log"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
		if err != nil || r.Status != nfs3.OK {
			die("CREATE: %v %v", err, r.Status)
		}
		return r.Object
	}
	var shared nfs3.FH
	if *op == "append-shared" {
		shared = mk(c0, root)
	}
	rec := make([]byte, 100)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		c, dir := cl(i)
		f := shared
		if f == nil {
			f = mk(c, dir)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range *ops {
				r, err := c.Append(ctx, f, rec, nfs3.Unstable)
				if err != nil || r.Status != nfs3.OK {
					die("APPEND: %v %v", err, r.Status)
				}
			}
		}()
	}
	wg.Wait()
	return float64(*ops*n) / time.Since(start).Seconds()
}

func main() {
	flag.Parse()
	what := "CREATE+REMOVE pairs"
	if *op != "create" {
		what = "APPENDs (" + *op + ")"
	}
	fmt.Printf("%s on a %s export under %s, %d per client, median of %d\n\n", what, *opts, *work, *ops, *reps)
	fmt.Println("| clients | saved replies (ops/s) | memory only (ops/s) | saved / memory |")
	fmt.Println("|---|---|---|---|")
	for _, f := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			die("-clients: %v", err)
		}
		var saved, mem []float64
		for r := range *reps {
			// Alternate which goes first.
			if r%2 == 0 {
				saved, mem = append(saved, run(false, n)), append(mem, run(true, n))
			} else {
				mem, saved = append(mem, run(true, n)), append(saved, run(false, n))
			}
		}
		s, m := stats.Median(saved), stats.Median(mem)
		fmt.Printf("| %d | %.0f | %.0f | %.2f |\n", n, s, m, s/m)
	}
}
