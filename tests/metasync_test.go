package tests

import (
	"sync"
	"syscall"
	"testing"

	"snfs/nfs3"
	"snfs/server"
	"snfs/store"
)

// syncLog records, in order, the inode numbers the server flushed.
type syncLog struct {
	mu   sync.Mutex
	inos []uint64
}

func (l *syncLog) hook(n *store.Node, dataOnly bool) error {
	l.mu.Lock()
	l.inos = append(l.inos, n.Stat.Ino)
	l.mu.Unlock()
	return store.SyncNode(n, dataOnly)
}

func (l *syncLog) take() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.inos
	l.inos = nil
	return s
}

func inoOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestSyncMetadataCommits: on a sync export every namespace change is flushed
// before the reply, the new object before the directory that names it (a
// directory flush alone does not write the new inode on ext4 without a journal);
// LINK flushes the file's link count and the directory; an async export flushes
// neither.
func TestSyncMetadataCommits(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, opts := range []string{"rw,no_root_squash", "rw,no_root_squash,async"} {
		t.Run(opts, func(t *testing.T) {
			log := &syncLog{}
			e := newEnvWith(t, opts, func(c *server.Config) { c.Sync = log.hook })
			dir := e.dir
			async := e.cfg.Exports[0].Clients[0].Opts.Async
			root := inoOf(t, dir)
			check := func(op string, want ...uint64) {
				t.Helper()
				got := log.take()
				if async {
					want = nil
				}
				if len(got) != len(want) {
					t.Fatalf("%s flushed inodes %v, want %v", op, got, want)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s flushed inodes %v, want %v (in this order)", op, got, want)
					}
				}
			}

			f := e.create(e.nfs, e.root, "f", 0o644)
			check("CREATE", inoOf(t, e.path("f")), root)

			mk, err := e.nfs.Mkdir(ctx, e.root, "d", nfs3.Sattr{})
			ok(t, "MKDIR", mk.Status, err)
			check("MKDIR", inoOf(t, e.path("d")), root)

			ln, err := e.nfs.Link(ctx, f, e.root, "l")
			ok(t, "LINK", ln.Status, err)
			check("LINK", inoOf(t, e.path("f")), root)

			mode := uint32(0o600)
			sa, err := e.nfs.Setattr(ctx, &nfs3.SetattrArgs{Object: f, New: nfs3.Sattr{Mode: &mode}})
			ok(t, "SETATTR", sa.Status, err)
			check("SETATTR", inoOf(t, e.path("f")))

			rn, err := e.nfs.Rename(ctx, e.root, "l", e.lookup(e.root, "d"), "l")
			ok(t, "RENAME", rn.Status, err)
			check("RENAME", root, inoOf(t, e.path("d")))

			rm, err := e.nfs.Remove(ctx, e.root, "f")
			ok(t, "REMOVE", rm.Status, err)
			check("REMOVE", root)
		})
	}
}
