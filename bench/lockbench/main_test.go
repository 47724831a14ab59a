package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// sent is the number of calls per operation the mounts sent (callbacks they
// served and lock lease renewals, which a timer sends whatever the phase
// does, left out).
func sent(m map[string]float64) float64 {
	n := 0.0
	for k, v := range m {
		if !strings.HasSuffix(k, " callbacks") && !strings.HasSuffix(k, " lease renewals") {
			n += v
		}
	}
	return n
}

// TestLockbenchRuns: a short run of the whole benchmark (server, proxy, two
// real FUSE mounts) at no delay and at 1 ms finishes, every phase sends the
// calls it is meant to compare (one GETATTR per fstat; one LOCK and one
// LOCKU per lock+unlock), and the report has its tables.
func TestLockbenchRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: FUSE mounts and a server that switches to each caller's identity (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse (CI has it): ", err)
	}
	work, err := os.MkdirTemp("/var/tmp", "snfs-lockbench-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	cfg := config{work: work, delays: []time.Duration{0, time.Millisecond}, reps: 2, ops: 10, budget: 50 * time.Millisecond, trials: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d delays measured, want 2", len(res))
	}
	for _, r := range res {
		if len(r.reps) != 2 {
			t.Fatalf("delay %v: %d repetitions, want 2", r.delay, len(r.reps))
		}
		for k, x := range r.reps {
			if g := x.getattr.calls; sent(g) != 1 || g["A GETATTR"] != 1 {
				t.Errorf("delay %v rep %d: calls per fstat %v, want A GETATTR 1", r.delay, k, g)
			}
			if l := x.lock.calls; sent(l) != 2 || l["A LOCK"] != 1 || l["A LOCKU"] != 1 {
				t.Errorf("delay %v rep %d: calls per lock+unlock %v, want A LOCK 1, A LOCKU 1", r.delay, k, l)
			}
			if len(x.grant.lat) != 3 || len(x.grantFromCall) != 3 {
				t.Errorf("delay %v rep %d: %d grants timed, want 3", r.delay, k, len(x.grant.lat))
			}
		}
	}
	md := report(cfg, res, "go test ./bench/lockbench", "")
	for _, want := range []string{"| 0s | 10 |", "| 1ms |", "A blocked F_SETLKW granted", "A GETATTR 1.00"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// TestLockbenchBFirst: with -b-first, B is the file's pinned holder and each
// fstat through A is a GETATTR that waits for a callback B answers
// (docs/protocol.md section 10.1); the counts say so, and the locks still
// cost one LOCK and one LOCKU.
func TestLockbenchBFirst(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: FUSE mounts and a server that switches to each caller's identity (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse (CI has it): ", err)
	}
	work, err := os.MkdirTemp("/var/tmp", "snfs-lockbench-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	cfg := config{work: work, delays: []time.Duration{0}, reps: 1, ops: 10, trials: 2, bFirst: true}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	x := res[0].reps[0]
	if g := x.getattr.calls; g["A GETATTR"] != 1 || g["B callbacks"] != 1 {
		t.Errorf("per fstat through A: %v, want A GETATTR 1 and B callbacks 1 (B is the pinned holder)", g)
	}
	if l := x.lock.calls; sent(l) != 2 || l["A LOCK"] != 1 || l["A LOCKU"] != 1 {
		t.Errorf("per lock+unlock: %v, want A LOCK 1, A LOCKU 1", l)
	}
}

// TestLockbenchDelegation: with -delegation, the lock phase's file is A's
// alone and its locks are delegated: a lock+unlock sends nothing (after the
// warm-up's first LOCK), while fstat is still one GETATTR.
func TestLockbenchDelegation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: FUSE mounts, fanotify permission events (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse (CI has it): ", err)
	}
	work, err := os.MkdirTemp("/var/tmp", "snfs-lockbench-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	cfg := config{work: work, delays: []time.Duration{0}, reps: 1, ops: 10, trials: 2, deleg: true}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	x := res[0].reps[0]
	if g := x.getattr.calls; g["A GETATTR"] != 1 {
		t.Errorf("per fstat through A: %v, want A GETATTR 1", g)
	}
	if l := x.lock.calls; l["A LOCK"] != 0 || l["A LOCKU"] != 0 {
		t.Errorf("per delegated lock+unlock: %v, want no LOCK or LOCKU", l)
	}
	if gr := x.grant.calls; gr["B LOCK"] != 1 {
		t.Errorf("per blocked-lock trial: %v, want B LOCK 1 (the shared file is not delegated)", gr)
	}
}
