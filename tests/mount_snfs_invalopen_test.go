package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"snfs/internal/fsx"
	"snfs/mount/cachemgr"
	"snfs/nfs3"
	"snfs/server"

	"golang.org/x/sys/unix"
)

// TestMountFsxSNFSSharedReader: the random tester on an snfs-mode mount while
// a plain NFSv3 client reads the file again and again: an nfs-mode mount of
// the same export, or the Go NFSv3 client (READs with no cache of its own,
// every one reaching the server). Each plain READ of the file the snfs mount
// has open for writing calls that mount back (CB_WRITEBACK_INVALIDATE: write
// back, stop caching, drop the kernel's pages; or, with passthrough writers,
// the pinned holder's CB_WRITEBACK) in the middle of the tester's sequence,
// and the file stays write-shared while the plain client's holds last. No
// write or mapped write may be lost by it: the tester compares its reads with
// the model, and every check the export directory after an fsync. With and
// without FUSE passthrough; the default mix and one with more mapped writes.
func TestMountFsxSNFSSharedReader(t *testing.T) {
	t.Parallel()
	ops := fsxOps(t) / 4
	mapMix := fsx.Weights{Read: 15, Write: 15, MapRead: 10, MapWrite: 30, Truncate: 10, Fsync: 3}
	for _, c := range []struct {
		name        string
		passthrough bool
		client      bool // the Go NFSv3 client reads, not an nfs-mode mount
		weights     fsx.Weights
		seed        uint64
	}{
		{"passthrough,mount", true, false, fsx.Weights{}, 22},
		{"passthrough,client,mapwrite", true, true, mapMix, 24},
		{"passthrough=false,mount,mapwrite", false, false, mapMix, 25},
		{"passthrough=false,client", false, true, fsx.Weights{}, 23},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each its own server and mounts
			e := newEnv(t, "rw,no_root_squash")
			// Plain holds that end within the run: the tester's next OPEN
			// (a reopen; no delayed close to take over with the Go client)
			// may cache again, and the next plain READ calls it back again.
			e.restartWith(func(c *server.Config) {
				c.Table.PlainHold, c.Table.RecallBackoff = sharedHold, 100*time.Millisecond
			})
			closeDelay := 2 * time.Second
			if c.client {
				closeDelay = 0
			}
			serverFiles(t, e, "fsx.dat")
			a := newSNFSMountOpts(t, e, "A", time.Hour, closeDelay, c.passthrough)
			cfg := fsxConfig(filepath.Join(a.dir, "fsx.dat"), ops, fsxSeed(t, c.seed))
			cfg.Weights = c.weights
			// Reopens (new OPENs, which may cache again) apart from the
			// checks, whatever the length.
			cfg.ReopenEvery = 97
			var read func() error
			if c.client {
				read = func() error { _, err := plainReadAll(e, "fsx.dat"); return err }
			} else {
				b := newMount(t, e)
				read = func() error { _, err := os.ReadFile(filepath.Join(b.dir, "fsx.dat")); return err }
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var reads int
			var readErr error
			wg.Go(func() { reads, readErr = sharedReader(read, cfg.Seed, stop) })
			res := runFsxChild(t, fsxChildConfig{Cfg: cfg, Compare: []string{e.path("fsx.dat")}},
				func() { t.Error("unexpected restart request") })
			close(stop)
			wg.Wait()
			st := cachemgr.StatsOf(a.v)
			t.Logf("%d reads by the plain client; the snfs mount had %d callbacks (%d pinned), %d write-backs",
				reads, st.Callbacks.Load(), st.Pinned.Load(), st.WriteBacks.Load())
			if res.Err != "" {
				t.Fatalf("%s\nreplay: SNFS_FSX_SEED=%d SNFS_FSX_OPS=%d go test -count=1 -v -run '^%s$' ./tests",
					res.Err, cfg.Seed, fsxOps(t), t.Name())
			}
			t.Log(res.Report)
			if readErr != nil {
				t.Errorf("the plain client's reads: %v", readErr)
			}
			if st.Callbacks.Load() == 0 {
				t.Error("the plain client's reads made no callback: the race was not tested")
			}
		})
	}
}

// sharedHold is the server's plain hold in TestMountFsxSNFSSharedReader.
const sharedHold = 300 * time.Millisecond

// sharedReader calls read again and again until stop closes, with seeded
// pauses: of up to 20 ms, and one in ten longer than sharedHold (the file's
// plain hold ends); it returns how many reads it made. The file not being
// there yet (or for a moment) is not an error.
func sharedReader(read func() error, seed uint64, stop <-chan struct{}) (int, error) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	n := 0
	for {
		pause := time.Duration(r.IntN(20000)) * time.Microsecond
		if r.IntN(10) == 0 {
			pause += sharedHold + 100*time.Millisecond
		}
		select {
		case <-stop:
			return n, nil
		case <-time.After(pause):
		}
		if err := read(); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
}

// plainReadAll reads the export's file name whole with the Go NFSv3 client
// on e's plain connection (LOOKUP, then READs to EOF), waiting out JUKEBOX
// (a callback the server waits for). A file not there is fs.ErrNotExist.
func plainReadAll(e *env, name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	retry := func(call func() (nfs3.Status, error)) error {
		for {
			st, err := call()
			switch {
			case err != nil:
				return err
			case st == nfs3.OK:
				return nil
			case st == nfs3.ErrNoEnt:
				return fs.ErrNotExist
			case st != nfs3.ErrJukebox:
				return st
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	var fh nfs3.FH
	if err := retry(func() (nfs3.Status, error) {
		res, err := e.nfs.Lookup(ctx, e.root, name)
		if err != nil {
			return 0, err
		}
		fh = res.Object
		return res.Status, nil
	}); err != nil {
		return nil, fmt.Errorf("LOOKUP %s: %w", name, err)
	}
	var out []byte
	for {
		var rd *nfs3.ReadRes
		if err := retry(func() (nfs3.Status, error) {
			var err error
			if rd, err = e.nfs.Read(ctx, fh, uint64(len(out)), 1<<20); err != nil {
				return 0, err
			}
			return rd.Status, nil
		}); err != nil {
			return nil, fmt.Errorf("READ %s at %d: %w", name, len(out), err)
		}
		out = append(out, rd.Data...)
		if rd.EOF || len(rd.Data) == 0 {
			return out, nil
		}
	}
}

// TestMountSNFSPinnedMappedStore: A writes a file through a passthrough
// open; a plain NFSv3 client (the Go client's READs) reads it, which makes A the
// file's pinned holder (docs/protocol.md section 10.1). A then stores into a
// shared mapping of the file (no event reaches the mount) and, before any
// fsync or close, reads the range through the same open and writes next to
// the stores in the same page: the read and the write are refreshed from the
// server first, which must not lay the server's older bytes over the stores.
// The stores are in A's read, in the server's file after A's fsync, and in
// the plain client's read after that. With and without msync (the tester's
// failure had one).
func TestMountSNFSPinnedMappedStore(t *testing.T) {
	t.Parallel()
	for _, msync := range []bool{false, true} {
		t.Run(fmt.Sprintf("msync=%v", msync), func(t *testing.T) {
			e := newEnv(t, "rw,no_root_squash")
			a := newSNFSMount(t, e, "A", "", time.Hour)
			requirePassthrough(t, a)
			_, pt0 := readsOf(a)
			fa, err := os.OpenFile(a.path("m"), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer fa.Close()
			if _, pt := readsOf(a); pt == pt0 {
				t.Skip("the write open did not pass through (no pre-content fanotify here)")
			}
			model := randBytes(91, 100000)
			if _, err := fa.WriteAt(model, 0); err != nil {
				t.Fatal(err)
			}
			if got, err := plainReadAll(e, "m"); err != nil || !bytes.Equal(got, model) {
				t.Fatalf("the plain client reads %d bytes (%v), not A's %d", len(got), err, len(model))
			}
			if n := cachemgr.StatsOf(a.v).Pinned.Load(); n != 1 {
				t.Fatalf("A's pinned count after the plain read: %d, want 1", n)
			}
			// Grow the file first, as the tester does before a mapped write
			// past the end: the server's new bytes are zeros.
			model = append(model, make([]byte, 20000)...)
			if err := fa.Truncate(int64(len(model))); err != nil {
				t.Fatal(err)
			}
			m, err := syscall.Mmap(int(fa.Fd()), 0, len(model), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if m != nil {
					syscall.Munmap(m)
				}
			}()
			stores := randBytes(92, 15000)
			copy(m[98000:], stores) // over the old end, into the grown part
			copy(model[98000:], stores)
			if msync {
				if err := unix.Msync(m, unix.MS_SYNC); err != nil {
					t.Fatal(err)
				}
			}
			got := make([]byte, 20000)
			if _, err := fa.ReadAt(got, 96000); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, model[96000:116000]) {
				t.Fatalf("A's read after its mapped stores: %s", firstDiff(got, model[96000:116000], 96000))
			}
			// A write into the last stored page, next to the stores.
			w := randBytes(93, 100)
			if _, err := fa.WriteAt(w, 113100); err != nil {
				t.Fatal(err)
			}
			copy(model[113100:], w)
			err = syscall.Munmap(m)
			m = nil
			if err != nil {
				t.Fatal(err)
			}
			if err := fa.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, e.path("m")); !bytes.Equal(got, model) {
				t.Fatalf("the server after A's fsync: %s", firstDiff(got, model, 0))
			}
			if got, err := plainReadAll(e, "m"); err != nil || !bytes.Equal(got, model) {
				t.Fatalf("the plain client after A's fsync (%v): %s", err, firstDiff(got, model, 0))
			}
		})
	}
}

// firstDiff describes where got differs from want (base: want's offset in
// the file).
func firstDiff(got, want []byte, base int) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	if i == len(got) && i == len(want) {
		return "equal"
	}
	return fmt.Sprintf("%d bytes, want %d; first difference at offset %d (got %x, want %x)", len(got), len(want),
		base+i, got[i:min(i+8, len(got))], want[i:min(i+8, len(want))])
}

// TestMountSNFSPinnedEntryStores: stores through a shared mapping go on,
// from another thread, while a plain READ makes A the pinned holder: the
// callback writes the whole file back, and a store landing in a page after
// the write-back read that page must still reach the server (at A's fsync):
// the entry must not record such a page as sent. Each round: a fresh 1 MiB
// file written through a passthrough open and mapped, a storer writing
// counters across its pages, the plain READ, then the storer stopped, A's
// fsync, and the server's file compared with the mapping.
func TestMountSNFSPinnedEntryStores(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	requirePassthrough(t, a)
	const size, rounds = 1 << 20, 8
	for k := range rounds {
		name := fmt.Sprintf("entry%d", k)
		_, pt0 := readsOf(a)
		fa, err := os.OpenFile(a.path(name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer fa.Close() // on a failure: the mount's unmount needs it closed
		if _, pt := readsOf(a); pt == pt0 {
			t.Skip("the write open did not pass through (no pre-content fanotify here)")
		}
		if _, err := fa.WriteAt(randBytes(uint64(500+k), size), 0); err != nil {
			t.Fatal(err)
		}
		m, err := syscall.Mmap(int(fa.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for n := uint64(1); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				off := int(n*4096+n/256*8) % (size - 8)
				binary.LittleEndian.PutUint64(m[off:], n)
			}
		})
		_, rerr := plainReadAll(e, name)
		close(stop)
		wg.Wait()
		want := append([]byte(nil), m...)
		uerr := syscall.Munmap(m)
		if rerr != nil || uerr != nil {
			t.Fatalf("round %d: plain read %v, munmap %v", k, rerr, uerr)
		}
		if err := fa.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, e.path(name)); !bytes.Equal(got, want) {
			t.Fatalf("round %d: the server after A's fsync: %s", k, firstDiff(got, want, 0))
		}
		if err := fa.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := cachemgr.StatsOf(a.v).Pinned.Load(); n != rounds {
		t.Errorf("A was made the pinned holder %d times, want %d", n, rounds)
	}
}
