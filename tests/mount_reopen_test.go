package tests

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestMountSNFSServerRestartRefusedReopens: after a refused reclaim the
// server holds no open of the mount's (docs/protocol.md 4.5, 7.1: every file
// is treated as fenced and OPENed again). A file an application keeps open
// for writing across the restart must be OPENed again: otherwise another
// client's OPEN is answered with no regard to it (here: no callback to the
// writer), and each of the writer's later CLOSEs is one the server never
// counted (found by the client's model check, D3). A write through by the
// writer still reaches the other client (the server takes it as a plain
// access and calls the other client back): checked too.
func TestMountSNFSServerRestartRefusedReopens(t *testing.T) {
	requireFUSE(t)
	s := newServeProc(t, "--grace", "0")
	old := bytes.Repeat([]byte("old "), 1000)
	if err := os.WriteFile(s.path("f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	a := startMount(t, s, "", "")
	fd, err := os.OpenFile(a.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	s.restart()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(a.logPath)
		if bytes.Contains(b, []byte("open files opened again")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mount did not finish its refused reclaim within 30 s")
		}
		os.Stat(a.path("nothing")) // a call: the reconnect shows the restart
		time.Sleep(50 * time.Millisecond)
	}
	before := scrape(t, a.metrics, "snfs_client_callbacks_total")
	b := startMount(t, s, "", "")
	if got := mustRead(t, b.path("f")); !bytes.Equal(got, old) {
		t.Fatalf("B's first read: %d bytes, different", len(got))
	}
	// The server knows A's open for writing again: B's OPEN calls A back
	// (A, alone on the file, was granted caching by its new OPEN).
	if n := scrape(t, a.metrics, "snfs_client_callbacks_total"); n <= before {
		t.Errorf("B's open of a file A has open for writing called A back %v times; want some (the server counts no open of A's)", n-before)
	}
	newer := bytes.Repeat([]byte("new "), 1000)
	if _, err := fd.WriteAt(newer, 0); err != nil {
		t.Fatal(err)
	}
	if err := fd.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, s.path("f")); !bytes.Equal(got, newer) {
		t.Fatalf("the server's file after A's fsync: %.20q; want %.20q", got, newer)
	}
	if got := mustRead(t, b.path("f")); !bytes.Equal(got, newer) {
		t.Errorf("B read %.20q after A's write; want %.20q (B cached a file A had open for writing)", got, newer)
	}
}
