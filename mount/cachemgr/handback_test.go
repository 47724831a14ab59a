package cachemgr

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/state/clientfile"
)

// TestHandBackBeforeReopen: A holds a kept write open of f with dirty data;
// B's GETATTR has the server call A back (CB_WRITEBACK). A writes back and,
// holding only the kept open, hands it back (CB_TREAT_AS_CLOSED). An
// application's open of f on A begun after that decision must reach the
// server after the answer (client/handback.go). Sent before it, the server
// granted it caching (A's kept open still counted) and then dropped it with
// the answer: B's write open that followed was let in with no callback to
// A, which went on caching, and what A appended ended as a false conflict
// copy (TestMountSNFSAppendServerKills, CI of 146986e).
func TestHandBackBeforeReopen(t *testing.T) {
	a, b, ia, ib := twoSNFS(t, clientfile.UntilRecalled, []byte("old\n"))
	ctx := context.Background()
	aWritesKept(t, a, ia, []byte("a1\n")) // keptlease_test.go

	// The callback's write-back done, an application's open of f on A
	// gives the kept open back, as the lease of kept opens has it while a
	// callback is being served (keptlease.go): CLOSE, clean. A holds
	// nothing of f then, and hands it back; the open goes on to its OPEN
	// once that is decided, and the answer waits a while for it.
	var gaveBack sync.Once
	mgrOf(a).beforeCallbackEnd.set(func(in *vfs.Inode) {
		if in != ia {
			return
		}
		gaveBack.Do(func() {
			snOf(ia).openMu.Lock()
			acts, _, _ := mgrOf(a).giveBackUntrustedLocked(ctx, ia)
			snOf(ia).openMu.Unlock()
			mgrOf(a).notify(ia, acts)
		})
	})
	opened := make(chan *vfs.File, 1)
	var once sync.Once
	mgrOf(a).handedBack.set(func(in *vfs.Inode) {
		if in != ia {
			return
		}
		once.Do(func() {
			answered := make(chan struct{})
			go func() {
				defer close(answered)
				f, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_WRONLY)
				if err != nil {
					t.Error(err)
				}
				opened <- f
			}()
			select {
			case <-answered:
			case <-time.After(500 * time.Millisecond): // the OPEN waits for this answer
			}
		})
	})
	t.Cleanup(func() { mgrOf(a).beforeCallbackEnd.set(nil) })
	t.Cleanup(func() { mgrOf(a).handedBack.set(nil) })
	cbs := mgrOf(a).stats.Callbacks.Load()
	if _, err := b.GetattrFH(ctx, vfs.Cred{}, ib.FH); err != nil {
		t.Fatal(err)
	}
	if mgrOf(a).stats.Callbacks.Load() == cbs {
		t.Fatal("B's GETATTR called A back for nothing: the race is not set up")
	}
	fa := <-opened
	if fa == nil {
		t.FailNow()
	}

	// A has f open: B's write open must call A back first.
	cbs = mgrOf(a).stats.Callbacks.Load()
	fb, _, err := b.Open(ctx, ib, vfs.Cred{}, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if mgrOf(a).stats.Callbacks.Load() == cbs {
		t.Error("B's write open made no callback to A, which has f open: the server dropped A's open with the hand-back that followed it")
	}
	ia.Mu.Lock()
	aCaching := stOf(ia).Caching()
	ia.Mu.Unlock()
	ib.Mu.Lock()
	bCaching := stOf(ib).Caching()
	ib.Mu.Unlock()
	if aCaching && bCaching {
		t.Error("A and B both cache f, both open for writing")
	}
	for _, c := range []struct {
		v *vfs.FS
		f *vfs.File
	}{{a, fa}, {b, fb}} {
		if err := c.v.Release(ctx, c.f); err != nil {
			t.Error(err)
		}
	}
}
