package tests

import (
	"context"
	"fmt"
	"snfs/state"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/server"
)

// TestSNFSVersionsDurable: versions are never reissued, across a restart of the
// server either (docs/protocol.md, section 4.3.3's cure): every version an OPEN
// returns after the restart is above every version issued before it, and the
// old version of a write open after the restart is not one issued before it
// (the server lost the files' versions: nothing cached before is known valid).
func TestSNFSVersionsDurable(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	const files = 4
	fhs := make([]nfs3.FH, files)
	for i := range fhs {
		fhs[i] = snfsCreate(t, e, fmt.Sprintf("ver%d", i))
	}
	a := newProtoClient(t, e, "versions-a")
	issued := map[uint64]bool{}
	var maxBefore uint64
	for round := 0; round < 2; round++ {
		for _, fh := range fhs {
			res := a.openOrFatal(t, fh, state.Write)
			if res.CacheVersion == 0 || issued[res.CacheVersion] {
				t.Fatalf("OPEN for writing: version %d is not fresh (issued so far: %v)", res.CacheVersion, issued)
			}
			issued[res.CacheVersion] = true
			maxBefore = max(maxBefore, res.CacheVersion)
			a.close(fh, state.Write, true)
		}
	}

	// a never comes back: a short grace period, which ends at its bound.
	e.restartWith(func(c *server.Config) { c.Grace = 500 * time.Millisecond })
	// The old registration belongs to the old instance: register anew.
	b := newProtoClient(t, e, "versions-b")
	for i, fh := range fhs {
		mode := state.Write
		if i%2 == 1 {
			mode = state.Read // a new entry takes a fresh version for a read open too
		}
		res := b.openOrFatal(t, fh, mode)
		if res.CacheVersion <= maxBefore {
			t.Errorf("file %d after the restart: version %d, not above %d issued before it", i, res.CacheVersion, maxBefore)
		}
		if res.OldCacheVersion != res.CacheVersion {
			t.Errorf("file %d, the first OPEN after the restart (%v): old version %d, want the new version %d twice (nothing cached before is known valid)",
				i, mode, res.OldCacheVersion, res.CacheVersion)
		}
		b.close(fh, mode, false)
	}
}

// TestSNFSPlainWriteDropsVersion: a WRITE by a plain NFSv3 client (not a
// protocol client) drops the file's version: the next protocol OPEN, for
// reading or for writing, takes a fresh version and returns it twice, so no
// protocol client's cached data survives the change.
func TestSNFSPlainWriteDropsVersion(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	a := newProtoClient(t, e, "plain-a")
	cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, mode := range []state.Mode{state.Read, state.Write} {
		t.Run(mode.String(), func(t *testing.T) {
			fh := snfsCreate(t, e, "plain-"+mode.String())
			r1 := a.openOrFatal(t, fh, state.Write)
			a.close(fh, state.Write, false)
			// The version stays while nobody else changes the file.
			r2 := a.openOrFatal(t, fh, state.Read)
			if r2.CacheVersion != r1.CacheVersion || r2.OldCacheVersion != r1.CacheVersion {
				t.Fatalf("a read open after the write open: versions %d/%d, want %d twice", r2.CacheVersion, r2.OldCacheVersion, r1.CacheVersion)
			}
			a.close(fh, state.Read, false)

			wres, err := e.nfs.Write(cx, fh, 0, []byte("plain"), nfs3.FileSync)
			ok(t, "plain WRITE", wres.Status, err)

			r3 := a.openOrFatal(t, fh, mode)
			if r3.CacheVersion <= r1.CacheVersion {
				t.Errorf("OPEN for %v after a plain WRITE: version %d, not above %d", mode, r3.CacheVersion, r1.CacheVersion)
			}
			if r3.OldCacheVersion != r3.CacheVersion {
				t.Errorf("OPEN for %v after a plain WRITE: old version %d, want the new version %d (the plain change invalidates every cache)",
					mode, r3.OldCacheVersion, r3.CacheVersion)
			}
			if r3.CacheEnabled {
				t.Errorf("OPEN for %v within the plain writer's hold: caching granted", mode)
			}
			if r3.Attr == nil || r3.Attr.Size != 5 {
				t.Errorf("OPEN attributes do not show the plain WRITE: %+v", r3.Attr)
			}
			a.close(fh, mode, false)
		})
	}
}
