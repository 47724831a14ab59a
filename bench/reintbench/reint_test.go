// Package reintbench measures REINTEGRATE's durability cost
// (docs/protocol.md section 21.3): a batch of CREATEs on a sync export
// applied with one flush per record (each as its NFSv3 CREATE would: the
// new file, then its directory) against one group commit per batch, in
// the same run. The server runs in this process on 127.0.0.1, its export
// and state under /var/tmp (a disk, not tmpfs: the flushes are the cost).
//
//	go test -run '^$' -bench Reintegrate -benchtime 20x ./bench/reintbench
package reintbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
)

// BenchmarkReintegrate: one op is one batch of -records CREATEs in a fresh
// directory. fsyncs/op is the server's count of the flushes it issued.
func BenchmarkReintegrate(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		for _, each := range []bool{true, false} {
			name := fmt.Sprintf("records=%d/group", n)
			if each {
				name = fmt.Sprintf("records=%d/each", n)
			}
			b.Run(name, func(b *testing.B) { benchBatch(b, n, each) })
		}
	}
}

func benchBatch(b *testing.B, records int, each bool) {
	if os.Geteuid() != 0 {
		b.Skip("the server runs as root (no_root_squash export)")
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("/var/tmp", "reintbench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	export, stateDir := dir+"/export", dir+"/state"
	for _, d := range []string{export, stateDir} {
		if err := os.Mkdir(d, 0o777); err != nil {
			b.Fatal(err)
		}
	}
	o, err := server.ParseOptions(server.DefaultOptions, "rw,no_root_squash,sync")
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(server.Config{StateDir: stateDir, Logger: log, ReintegrateFlushEach: each,
		Exports: []server.ExportConfig{{Path: export, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln, nil) }()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
	}()
	addr := ln.Addr().String()
	m, err := client.DialMount(ctx, "tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	mres, err := m.Mnt(ctx, export)
	m.Close()
	if err != nil || mres.Status != 0 {
		b.Fatalf("MNT: %v %v", err, mres.Status)
	}
	s, err := client.DialSession(ctx, "tcp", addr, client.SessionConfig{Name: "reintbench", Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Disconnect()
	nfs, err := client.DialNFS(ctx, "tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nfs.Close()
	mode := uint32(0o755)
	lsn := uint64(0)
	var dirs []nfs3.FH
	var permits []snfs1.PermitRef
	for i := 0; i < b.N; i++ { // the directories and permits, outside the timing
		r, err := nfs.Mkdir(ctx, mres.FH, fmt.Sprintf("d%d", i), nfs3.Sattr{Mode: &mode})
		if err != nil || r.Status != nfs3.OK {
			b.Fatalf("MKDIR: %v %v", err, r.Status)
		}
		dirs = append(dirs, r.Object)
		deadline := time.Now().Add(10 * time.Second)
		for {
			id, granted, err := s.GetPermit(ctx, r.Object)
			if err != nil {
				b.Fatal(err)
			}
			if granted {
				permits = append(permits, snfs1.PermitRef{Dir: r.Object, Permit: id})
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("GET_PERMIT never granted")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	batches := make([][]snfs1.CMLRecord, b.N)
	fmode := uint32(0o644)
	for i := range batches {
		for j := 0; j < records; j++ {
			lsn++
			batches[i] = append(batches[i], snfs1.CMLRecord{LSN: lsn, Op: snfs1.CMLCreate, Dir: snfs1.ObjRef{FH: dirs[i]},
				Name: fmt.Sprintf("f%d", j), Attr: nfs3.Sattr{Mode: &fmode}, New: uint64(j + 1)})
		}
	}
	before := srv.GatherStats(export).Fsyncs
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := s.Reintegrate(ctx, []snfs1.PermitRef{permits[i]}, batches[i])
		if err != nil || res.Failed() != nil || len(res.Results) != records {
			b.Fatalf("REINTEGRATE: %v %+v", err, res)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(srv.GatherStats(export).Fsyncs-before)/float64(b.N), "fsyncs/op")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*records), "µs/record")
}
