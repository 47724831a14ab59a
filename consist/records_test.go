package consist

import (
	"os"
	"strings"
	"testing"
	"time"

	"snfs/snfs1"
	"snfs/state"
)

func diskDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "snfs-consist-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestRecordsDurable: registrations and the version mark survive a reopen; the
// same name and verifier get the same id, a new verifier (the client
// restarted) a new one, never one issued before.
func TestRecordsDurable(t *testing.T) {
	dir := diskDir(t)
	r, err := openRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := snfs1.Verifier{1}, snfs1.Verifier{2}
	a, restarted, err := r.register("host-a", v1)
	if err != nil || restarted {
		t.Fatalf("first registration: %v %v", err, restarted)
	}
	b, _, _ := r.register("host-b", v1)
	if a.id == b.id {
		t.Fatal("two names share an id")
	}
	if err := r.setVersionMark(1 << 20); err != nil {
		t.Fatal(err)
	}
	r.close()

	r, err = openRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if mark, err := r.versionMark(); err != nil || mark != 1<<20 {
		t.Fatalf("version mark after reopen: %d %v", mark, err)
	}
	again, restarted, err := r.register("host-a", v1)
	if err != nil || restarted || again.id != a.id {
		t.Fatalf("same name and verifier after reopen: id %d (was %d), restarted %v, %v", again.id, a.id, restarted, err)
	}
	reborn, restarted, err := r.register("host-a", v2)
	if err != nil || !restarted || reborn.id == a.id || reborn.id == b.id {
		t.Fatalf("new verifier: id %d (old %d, other %d), restarted %v, %v", reborn.id, a.id, b.id, restarted, err)
	}
}

// TestRecordsLocked: a second server on the same state directory is refused
// with an error that says so.
func TestRecordsLocked(t *testing.T) {
	dir := diskDir(t)
	r, err := openRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if _, err := openRecords(dir); err == nil || !strings.Contains(err.Error(), "another snfs server") {
		t.Fatalf("second open: %v", err)
	}
}

// TestOpenWritesNothing: OPEN and CLOSE write nothing to the state database
// (issue 15: no flush on the OPEN path); REGISTER of a new client does.
func TestOpenWritesNothing(t *testing.T) {
	d, err := New(Config{StateDir: diskDir(t), Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	before := d.rec.writes()
	if _, _, err := d.rec.register("host-a", snfs1.Verifier{1}); err != nil {
		t.Fatal(err)
	}
	afterReg := d.rec.writes()
	if afterReg == before {
		t.Fatal("a new registration wrote nothing")
	}
	fh := []byte("some-file-handle")
	open := func() {
		done := make(chan error, 1)
		d.Open(1, fh, state.Write, 0, func(_ state.OpenReply, err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// The first version reserves a block of versions (one durable write, off
	// the OPEN path); wait for it before counting.
	open()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if m, err := d.rec.versionMark(); err != nil || m > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first OPEN's block of versions was never made durable")
		}
	}
	afterReg = d.rec.writes()
	for i := 0; i < 100; i++ {
		done := make(chan error, 1)
		d.Open(1, fh, state.Write, 0, func(_ state.OpenReply, err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := d.Close(1, fh, state.Write, false); err != nil {
			t.Fatal(err)
		}
	}
	if got := d.rec.writes(); got != afterReg {
		t.Fatalf("100 OPENs and CLOSEs wrote %d pages", got-afterReg)
	}
}
