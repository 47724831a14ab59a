// Command wgbench measures stable-write throughput the way the write-gathering paper's
// Table 1 does: one client writes a file with FILE_SYNC WRITEs of a given size, with
// N writes in flight (the paper's biods), and reports client MiB/s, and - when given
// the server's metrics address and pid - server flushes per MiB and CPU seconds per
// MiB. With -disk DIR it measures the disk's own limit instead: N pwrites followed by
// one fdatasync, repeated, on a file in DIR. With -window it measures what perfect
// gathering would give this client and N through the network: windows of N
// UNSTABLE writes, each window followed by one COMMIT (one flush per N writes, no
// waiting to gather), and with -unstable the RPC ceiling (no flush at all).
//
//	wgbench -addr 127.0.0.1:2049 -export /srv/x -size 8192 -n 8 [-metrics ADDR -pid PID]
//	wgbench -disk /var/tmp -size 8192 -n 8
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"snfs/client"
	"snfs/nfs3"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:2049", "NFS server")
	mountAddr := flag.String("mount", "", "MOUNT server (default: -addr)")
	export := flag.String("export", "", "export path")
	size := flag.Int("size", 8192, "bytes per WRITE")
	n := flag.Int("n", 1, "writes in flight")
	total := flag.Int("total", 64<<20, "bytes to write")
	metrics := flag.String("metrics", "", "server metrics address, for flushes")
	pid := flag.Int("pid", 0, "server pid, for CPU seconds")
	disk := flag.String("disk", "", "measure the disk limit in this directory instead")
	name := flag.String("name", "wgbench.dat", "file name")
	unstable := flag.Bool("unstable", false, "send UNSTABLE writes (no flush at all): the RPC ceiling for this client and N")
	window := flag.Bool("window", false, "send N UNSTABLE writes, wait for all, then one COMMIT, repeated: every window\n"+
		"flushed once, the most any gathering server can give this client and N (its flushes batch all N writes)")
	flag.Parse()
	if *n < 1 || *n > 64 || *size < 512 || *size > 1<<20 || *total < *size || *total > 1<<30 {
		fmt.Fprintln(os.Stderr, "wgbench: -n 1..64, -size 512..1MiB, -total size..1GiB")
		os.Exit(2)
	}
	var err error
	if *disk != "" {
		err = diskLimit(filepath.Join(*disk, *name), *size, *n, *total)
	} else {
		if *mountAddr == "" {
			*mountAddr = *addr
		}
		err = nfsRun(*addr, *mountAddr, *export, *name, *size, *n, *total, *metrics, *pid, *unstable, *window)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wgbench:", err)
		os.Exit(1)
	}
}

func diskLimit(path string, size, n, total int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	start := time.Now()
	flushes := 0
	for off := 0; off < total; {
		for i := 0; i < n && off < total; i++ {
			if _, err := f.WriteAt(buf, int64(off)); err != nil {
				return err
			}
			off += size
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		flushes++
	}
	secs := time.Since(start).Seconds()
	mib := float64(total) / (1 << 20)
	fmt.Printf("RESULT mode=disk size=%d n=%d mib_s=%.1f flushes_per_mib=%.2f\n", size, n, mib/secs, float64(flushes)/mib)
	return nil
}

func nfsRun(addr, mountAddr, export, name string, size, n, total int, metrics string, pid int, unstable, window bool) error {
	stable, label := nfs3.FileSync, "nfs"
	switch {
	case window:
		stable, label = nfs3.Unstable, "nfs-window"
	case unstable:
		stable, label = nfs3.Unstable, "nfs-unstable"
	}
	ctx := context.Background()
	m, err := client.DialMount(ctx, "tcp", mountAddr)
	if err != nil {
		return err
	}
	mr, err := m.Mnt(ctx, export)
	m.Close()
	if err != nil {
		return err
	}
	if mr.Status != 0 {
		return mr.Status
	}
	c, err := client.DialNFS(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	mode := uint32(0o644)
	cr, err := c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: mr.FH, Name: name}, Mode: nfs3.Unchecked, Attr: nfs3.Sattr{Mode: &mode, Size: new(uint64)}})
	if err != nil {
		return err
	}
	if cr.Status != nfs3.OK {
		return cr.Status
	}
	fh := cr.Object
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	f0, cpu0 := fsyncs(metrics), cpuSeconds(pid)
	start := time.Now()
	var next int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	workers := n
	if window {
		firstErr = windows(ctx, c, fh, buf, n, total)
		workers = 0
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				off := next
				next += int64(size)
				mu.Unlock()
				if off >= int64(total) {
					return
				}
				res, err := c.Write(ctx, fh, uint64(off), buf, stable)
				if err == nil && res.Status != nfs3.OK {
					err = res.Status
				}
				if err == nil && res.Committed < stable {
					err = fmt.Errorf("server answered %v to FILE_SYNC", res.Committed)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					next = int64(total)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if firstErr != nil {
		return firstErr
	}
	mib := float64(total) / (1 << 20)
	out := fmt.Sprintf("RESULT mode=%s size=%d n=%d mib_s=%.1f", label, size, n, mib/secs)
	if metrics != "" {
		out += fmt.Sprintf(" flushes_per_mib=%.2f", (fsyncs(metrics)-f0)/mib)
	}
	if pid != 0 {
		out += fmt.Sprintf(" cpu_s_per_mib=%.4f", (cpuSeconds(pid)-cpu0)/mib)
	}
	fmt.Println(out)
	c.Remove(ctx, mr.FH, name)
	return nil
}

// windows writes total bytes as windows of n UNSTABLE writes sent at once, each
// window followed by one COMMIT once all its writes are answered.
func windows(ctx context.Context, c *client.NFS, fh nfs3.FH, buf []byte, n, total int) error {
	size := len(buf)
	errs := make([]error, n)
	for off := 0; off < total; {
		var wg sync.WaitGroup
		for i := 0; i < n && off < total; i++ {
			wg.Add(1)
			go func(i int, off uint64) {
				defer wg.Done()
				res, err := c.Write(ctx, fh, off, buf, nfs3.Unstable)
				if err == nil && res.Status != nfs3.OK {
					err = res.Status
				}
				errs[i] = err
			}(i, uint64(off))
			off += size
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		res, err := c.Commit(ctx, fh, 0, 0)
		if err == nil && res.Status != nfs3.OK {
			err = res.Status
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fsyncs sums snfs_server_fsync_total over exports.
func fsyncs(addr string) float64 {
	if addr == "" {
		return 0
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "snfs_server_fsync_total{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// cpuSeconds is a process's user+system CPU time from /proc.
func cpuSeconds(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}
