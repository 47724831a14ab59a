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
// Linux client flushes a small file on close); untar times, per file, what the
// Linux client sends for one file tar extracts (CREATE, a FILE_SYNC WRITE of
// -size bytes, and SETATTRs of owner, mode and times), as one "call".
//
// -gap busy-waits that long before each call, as a client that thinks between
// calls does (the Linux client in the UML guest: 100-200 µs), using a CPU as it
// does. With it, the server's CPU time per call (printed as cpu/call, from
// /proc/PID/stat with -pid) shows what the server takes from such a client on
// a shared machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"snfs/client"
	"snfs/nfs3"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:2049", "NFS server")
	export := flag.String("export", "", "export")
	maddr := flag.String("mount", "", "mount addr")
	op := flag.String("op", "null", "null|getattr|lookup|access|setattr|create|remove|mkdir|rmdir|newwrite|untar|commit|write")
	count := flag.Int("count", 20000, "calls")
	size := flag.Int("size", 8192, "write size")
	gap := flag.Duration("gap", 0, "busy-wait this long before each call")
	pid := flag.Int("pid", 0, "server process: report its CPU time per call")
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
	cpu0 := cpuTime(*pid)
	start := time.Now()
	for i := range lat {
		for g := time.Now(); time.Since(g) < *gap; {
		}
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
		case "untar":
			var cr *nfs3.CreateRes
			m, id, now := uint32(0o644), uint32(0), nfs3.Time{Sec: 1700000000}
			cr, err = c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: mr.FH, Name: fmt.Sprint("u", i)}, Mode: nfs3.Unchecked, Attr: nfs3.Sattr{Mode: &m}})
			if err == nil {
				_, err = c.Write(ctx, cr.Object, 0, buf, nfs3.FileSync)
			}
			for _, sa := range []nfs3.Sattr{{UID: &id, GID: &id}, {Mode: &m}, {Atime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: now}, Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: now}}} {
				if err == nil {
					_, err = c.Setattr(ctx, &nfs3.SetattrArgs{Object: cr.Object, New: sa})
				}
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
	cpu := ""
	if *pid != 0 {
		cpu = fmt.Sprintf(" cpu/call=%v", (cpuTime(*pid)-cpu0)/time.Duration(*count))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("op=%s calls/s=%.0f p50=%v p90=%v p99=%v", *op, float64(*count)/el.Seconds(), lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)*99/100])
	fmt.Println(cpu)
}

// cpuTime is the user+system CPU time of process pid so far (0 for pid 0).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
