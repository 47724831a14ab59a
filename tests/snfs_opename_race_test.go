package tests

import (
	"context"
	"fmt"
	"os"
	"snfs/state"
	"sync"
	"testing"
	"time"

	"snfs/metrics"
	"snfs/nfs3"
	"snfs/server"
)

// TestSNFSOpenNameReplaced: OPEN_NAME of a name that another client keeps
// replacing (write a new file, rename it over the name) opens the file the
// name names, old or new, and never answers NFS3ERR_STALE: the file the
// server looked up may be replaced before it is opened, and then the name is
// looked up again.
func TestSNFSOpenNameReplaced(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, by := range []string{"local", "nfs"} {
		t.Run(by, func(t *testing.T) { testOpenNameReplaced(t, by) })
	}
}

// testOpenNameReplaced runs the race with the name replaced by a local
// process (by "local") or by another NFS client's CREATE and RENAME ("nfs").
func testOpenNameReplaced(t *testing.T, by string) {
	e := newEnv(t, "rw,no_root_squash")
	if err := os.WriteFile(e.path("f"), []byte("v0"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := dialSNFS(t, e, "opename-a", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rounds := 3000
	if by == "nfs" {
		rounds = 6000
	}
	replace := func(i int) error {
		name := fmt.Sprintf(".f.%d", i)
		if by == "local" {
			if err := os.WriteFile(e.path(name), []byte(fmt.Sprint("v", i)), 0o644); err != nil {
				return err
			}
			return os.Rename(e.path(name), e.path("f"))
		}
		mode := uint32(0o644)
		cr, err := e.nfs.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: name}, Mode: nfs3.Unchecked, Attr: nfs3.Sattr{Mode: &mode}})
		if err == nil && cr.Status != nfs3.OK {
			err = fmt.Errorf("CREATE %s: %v", name, cr.Status)
		}
		if err != nil {
			return err
		}
		rn, err := e.nfs.Rename(ctx, e.root, name, e.root, "f")
		if err == nil && rn.Status != nfs3.OK {
			err = fmt.Errorf("RENAME %s f: %v", name, rn.Status)
		}
		return err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the other client: replace f by rename, as editors do
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := replace(i); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	stale := 0
	for i := 0; i < rounds; i++ {
		fh, _, err := a.OpenName(ctx, e.root, "f", state.Read)
		if err != nil {
			stale++
			if stale < 5 {
				t.Logf("OPEN_NAME %d: %v", i, err)
			}
			continue
		}
		// The file may be gone by now: its CLOSE may answer STALE.
		a.Close(ctx, fh, state.Read, false)
	}
	close(stop)
	wg.Wait()
	if stale > 0 {
		t.Fatalf("%d of %d OPEN_NAMEs of a name being replaced failed", stale, rounds)
	}
}

// openEntries counts the state table's entries of files open somewhere
// (every state but CLOSED and CLOSED_DIRTY, which a closed file keeps).
func openEntries(t *testing.T, reg *metrics.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	open := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "snfs_server_consist_entries" {
			continue
		}
		for _, m := range f.GetMetric() {
			st := m.GetLabel()[0].GetValue()
			if v := m.GetGauge().GetValue(); v != 0 && st != "CLOSED" && st != "CLOSED_DIRTY" {
				open[st] = v
			}
		}
	}
	return open
}

// TestSNFSCloseGone: the CLOSE of a file that another client deleted or
// replaced by rename while it was open answers OK and closes the open: the
// file is gone, but its entry in the state table is not (it was refused
// NFS3ERR_STALE and stayed in the table for good).
func TestSNFSCloseGone(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics = reg })
	a := dialSNFS(t, e, "close-gone", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, how := range []string{"replaced", "removed", "replaced", "removed"} {
		if err := os.WriteFile(e.path("f"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		mode := state.Read
		if i >= 2 {
			mode = state.Write
		}
		fh, _, err := a.OpenName(ctx, e.root, "f", mode)
		if err != nil {
			t.Fatal(err)
		}
		if how == "replaced" {
			err = os.WriteFile(e.path("t"), []byte("new"), 0o644)
			if err == nil {
				err = os.Rename(e.path("t"), e.path("f"))
			}
		} else {
			err = os.Remove(e.path("f"))
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Close(ctx, fh, mode, false); err != nil {
			t.Errorf("CLOSE (%v) of a file %s while open: %v", mode, how, err)
		}
	}
	if open := openEntries(t, reg); len(open) != 0 {
		t.Fatalf("files still open in the state table after every open was closed: %v", open)
	}
}
