package consist

import (
	"os"
	"strings"
	"testing"

	"snfs/snfs1"
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
