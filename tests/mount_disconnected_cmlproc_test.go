package tests

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"
	"snfs/state/clientfile"
)

// TestMountDisconnectedInProcessTree: the namespace changes made offline
// (docs/mount.md, "Disconnected operation") with the mount in this process
// (so the race detector covers the cache manager): offline on request, four
// writers at once each build a directory of files (created, written,
// renamed into place, some removed, one read back), then back online the
// export holds exactly what they were told was written, and no conflict is
// recorded.
func TestMountDisconnectedInProcessTree(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	e := newEnv(t, "rw,no_root_squash")
	logBuf := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, nil))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mount log:\n%s", logBuf)
		}
	})
	if err := os.Mkdir(filepath.Join(e.dir, "work"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := newSNFSMountWith(t, e, "A", "", snfsmount.Config{WriteBackDelay: time.Hour,
		CloseDelay: clientfile.UntilRecalled, Logger: log, Disconnected: true, DisconnectAfter: 2 * time.Second},
		fusefs.Options{})
	dir, v := m.dir, m.v
	if _, err := os.ReadDir(filepath.Join(dir, "work")); err != nil {
		t.Fatal(err)
	}
	if err := cachemgr.SetDisconnected(v, true); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, off := cachemgr.DisconnectedSince(v); off {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not offline 20 s after the request")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var mu sync.Mutex
	want := map[string][]byte{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := fmt.Sprintf("w%d", w)
			root := filepath.Join(dir, "work", d)
			if err := os.Mkdir(root, 0o755); err != nil {
				errs <- err
				return
			}
			for k := range 25 {
				name := fmt.Sprintf("f%d", k%15)
				data := randBytes(uint64(3800+w*100+k), 1+k*900)
				if err := os.WriteFile(filepath.Join(root, name+".tmp"), data, 0o644); err != nil {
					errs <- err
					return
				}
				if err := os.Rename(filepath.Join(root, name+".tmp"), filepath.Join(root, name)); err != nil {
					errs <- err
					return
				}
				got, err := os.ReadFile(filepath.Join(root, name))
				if err != nil || string(got) != string(data) {
					errs <- fmt.Errorf("read back %s/%s offline: %d bytes, %v", d, name, len(got), err)
					return
				}
				mu.Lock()
				want[d+"/"+name] = data
				mu.Unlock()
				if k%6 == 5 {
					if err := os.Remove(filepath.Join(root, name)); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					delete(want, d+"/"+name)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("offline: %v", err)
	}
	if err := cachemgr.SetDisconnected(v, false); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		got, err := exportFiles(filepath.Join(e.dir, "work"))
		diff := treeDiff(got, want)
		if err == nil && diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export after reconnection: %v %s", err, diff)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c, err := cachemgr.ReadConflicts(m.cacheDir); err != nil || len(c) != 0 {
		t.Fatalf("conflicts: %+v, %v; want none", c, err)
	}
}
