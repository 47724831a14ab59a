package tests

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"snfs/snfs1"
)

// TestSNFSOpenNameReplaced: OPEN_NAME of a name that another client keeps
// replacing (write a new file, rename it over the name) opens the file the
// name names, old or new, and never answers NFS3ERR_STALE: the file the
// server looked up may be replaced before it is opened, and then the name is
// looked up again.
func TestSNFSOpenNameReplaced(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.WriteFile(e.path("f"), []byte("v0"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := dialSNFS(t, e, "opename-a", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const rounds = 3000
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
			tmp := e.path(fmt.Sprintf(".f.%d", i))
			if err := os.WriteFile(tmp, []byte(fmt.Sprint("v", i)), 0o644); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, e.path("f")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	stale := 0
	for i := 0; i < rounds; i++ {
		fh, _, err := a.OpenName(ctx, e.root, "f", snfs1.Read)
		if err != nil {
			stale++
			if stale < 5 {
				t.Logf("OPEN_NAME %d: %v", i, err)
			}
			continue
		}
		if _, err := a.Close(ctx, fh, snfs1.Read, false); err != nil {
			t.Logf("CLOSE %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	if stale > 0 {
		t.Fatalf("%d of %d OPEN_NAMEs of a name being replaced failed", stale, rounds)
	}
}
