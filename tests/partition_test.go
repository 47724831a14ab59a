package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"snfs/internal/faultproxy"
)

// The partition tests run a real `snfs serve` and two real `snfs mount
// --mode=snfs` processes; client A reaches the server through a
// faultproxy.Proxy, client B directly.

// partitionSetup starts the server with callback timeout cbt, a proxy to it,
// mount A through the proxy and mount B directly, both with write-back
// delayed by an hour (dirty data stays in the cache directory).
func partitionSetup(t *testing.T, cbt time.Duration) (*srvProc, *faultproxy.Proxy, *mntProc, *mntProc) {
	t.Helper()
	requireFUSE(t)
	s := newServeProc(t, "--callback-timeout", cbt.String())
	// The files the tests write are the server's (serverFiles): their
	// dirty data and its callbacks are what the tests are about.
	for _, n := range []string{"dirty", "open", "shared"} {
		if err := os.WriteFile(s.path(n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := newProxy(t, s.addr())
	a := newMountProc(t, s, p.Port(), time.Hour)
	b := newMountProc(t, s, s.nfsPort, time.Hour)
	return s, p, a, b
}

// TestPartitionShort: client A is cut off for less than the callback
// timeout while it writes to an open file and reads its cache, and while B
// opens a file A holds dirty (the server's callback to A waits out the
// partition). A notices nothing: no error, its open file, cached and dirty
// data survive, and the server did not fence it; B reads A's bytes.
func TestPartitionShort(t *testing.T) {
	t.Parallel()
	const cbt = 6 * time.Second
	s, p, a, b := partitionSetup(t, cbt)

	dirty := randBytes(61, 300000)
	if err := os.WriteFile(a.path("dirty"), dirty, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := exportSize(t, filepath.Join(s.export, "dirty")); n != 0 {
		t.Fatalf("the export has %d bytes of A's dirty file before the partition; want none (delayed write-back)", n)
	}
	part1, part2 := randBytes(62, 100000), randBytes(63, 50000)
	f, err := os.OpenFile(a.path("open"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(part1); err != nil {
		t.Fatal(err)
	}

	p.Partition(cbt / 4)
	bRead := make(chan []byte, 1)
	go func() { // B's OPEN calls A back across the partition
		got, _ := os.ReadFile(b.path("dirty"))
		bRead <- got
	}()
	// A's application, during the partition.
	if _, err := f.Write(part2); err != nil {
		t.Fatalf("write to the open file during the partition: %v", err)
	}
	if got := mustRead(t, a.path("dirty")); !bytes.Equal(got, dirty) {
		t.Fatalf("A reads %d bytes of its dirty file during the partition, different", len(got))
	}
	if got := <-bRead; !bytes.Equal(got, dirty) {
		t.Fatalf("B reads %d bytes of the file A held dirty; want A's %d", len(got), len(dirty))
	}
	if p.Partitioned() {
		t.Fatal("B's read finished during the partition")
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync of A's open file after the partition: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close of A's open file after the partition: %v", err)
	}
	want := append(append([]byte{}, part1...), part2...)
	if got := mustRead(t, a.path("open")); !bytes.Equal(got, want) {
		t.Fatalf("A reads %d bytes of its open file, want %d", len(got), len(want))
	}
	if got := mustRead(t, filepath.Join(s.export, "open")); !bytes.Equal(got, want) {
		t.Fatalf("the export has %d bytes of A's fsynced file, want %d", len(got), len(want))
	}
	if n := s.metric("snfs_server_consist_callbacks_total"); n < 1 {
		t.Fatalf("callbacks: %v; B's open should have called A back", n)
	}
	if n := s.metric("snfs_server_consist_fencings_total"); n != 0 {
		t.Fatalf("the server fenced a client %v times (want 0: the partition was shorter than the callback timeout)", n)
	}
}

// TestPartitionLongConflict: client A holds dirty data of a file and is cut
// off for twice the callback timeout; B opens the same file, writes and
// fsyncs it (the server fences A when its callback times out). After the
// partition heals and A is unmounted, no byte is lost: the file has B's
// bytes, and A's version is kept beside it as NAME.snfs-conflict-* and
// listed by `snfs conflicts`.
func TestPartitionLongConflict(t *testing.T) {
	t.Parallel()
	const cbt = 2 * time.Second
	s, p, a, b := partitionSetup(t, cbt)

	mine := randBytes(71, 200000)
	if err := os.WriteFile(a.path("shared"), mine, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := exportSize(t, filepath.Join(s.export, "shared")); n != 0 {
		t.Fatalf("the export has %d bytes before the partition; want none (delayed write-back)", n)
	}
	healAt := time.Now().Add(2 * cbt)
	p.Partition(0)
	theirs := randBytes(72, 150000)
	f, err := os.OpenFile(b.path("shared"), os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatalf("B's open during A's partition: %v", err)
	}
	if _, err := f.Write(theirs); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.metric("snfs_server_consist_fencings_total"); n < 1 {
		t.Fatalf("fencings: %v; the server should have fenced A when its callback timed out", n)
	}
	time.Sleep(time.Until(healAt))
	p.Heal()

	// A reintegrates by its clean unmount at the latest.
	if !a.stop() {
		t.Error("A's unmount after the partition failed")
	}
	if got := mustRead(t, filepath.Join(s.export, "shared")); !bytes.Equal(got, theirs) {
		t.Fatalf("the export's file has %d bytes; want B's %d (B's fsync returned)", len(got), len(theirs))
	}
	if got := mustRead(t, b.path("shared")); !bytes.Equal(got, theirs) {
		t.Fatalf("B reads %d bytes; want its own %d", len(got), len(theirs))
	}
	conflicts, _ := filepath.Glob(filepath.Join(s.export, "shared.snfs-conflict-*"))
	if len(conflicts) != 1 {
		ents, _ := os.ReadDir(s.export)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("conflict files: %v (the export has %v); want one with A's version", conflicts, names)
	}
	if got := mustRead(t, conflicts[0]); !bytes.Equal(got, mine) {
		t.Fatalf("the conflict file has %d bytes; want A's %d", len(got), len(mine))
	}
	out, err := command(snfsBinary(t), "conflicts", "--cache-dir", a.cacheDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), filepath.Base(conflicts[0])) {
		t.Fatalf("snfs conflicts --cache-dir %s: %v\n%s\n(want it to list %s)", a.cacheDir, err, out, filepath.Base(conflicts[0]))
	}
}

// TestPartitionShortReset: A's connection is reset (not merely silent) while
// the server's callback to A is out, and A connects again well within the
// callback timeout. A "merely lost its connection" (issue 15): the server
// sends the callback again on A's new connection instead of failing it, so
// A is not fenced and B, whose OPEN caused the callback, reads A's bytes.
func TestPartitionShortReset(t *testing.T) {
	t.Parallel()
	const cbt = 6 * time.Second
	s, p, a, b := partitionSetup(t, cbt)

	dirty := randBytes(64, 200000)
	if err := os.WriteFile(a.path("dirty"), dirty, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := exportSize(t, filepath.Join(s.export, "dirty")); n != 0 {
		t.Fatalf("the export has %d bytes of A's dirty file; want none (delayed write-back)", n)
	}
	p.Stall(faultproxy.ServerToClient) // the callback to A waits in the proxy
	bRead := make(chan []byte, 1)
	go func() {
		got, _ := os.ReadFile(b.path("dirty"))
		bRead <- got
	}()
	for end := time.Now().Add(cbt / 2); s.metric("snfs_server_consist_callbacks_total") < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("B's OPEN sent no callback to A")
		}
	}
	time.Sleep(200 * time.Millisecond) // the callback is written to A's connection
	if n := p.Reset(); n < 1 {
		t.Fatalf("the proxy reset %d connections", n)
	}
	p.Restore(faultproxy.ServerToClient)
	select {
	case got := <-bRead:
		if !bytes.Equal(got, dirty) {
			t.Fatalf("B reads %d bytes of the file A held dirty; want A's %d", len(got), len(dirty))
		}
	case <-time.After(3 * cbt):
		t.Fatal("B's read did not finish")
	}
	if n := s.metric("snfs_server_consist_fencings_total"); n != 0 {
		t.Fatalf("the server fenced A %v times; want 0 (A was back within the callback timeout)", n)
	}
	if got := mustRead(t, a.path("dirty")); !bytes.Equal(got, dirty) {
		t.Fatalf("A reads %d bytes of its file after the reset; want %d", len(got), len(dirty))
	}
}
