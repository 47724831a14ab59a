package tests

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	snfsmount "snfs/mount"
	"snfs/mount/fusefs"
)

// newSNFSMountOpts is newSNFSMount with the close delay and FUSE passthrough
// chosen (`--close-delay`, `--passthrough`).
func newSNFSMountOpts(t *testing.T, e *env, name string, wbDelay, closeDelay time.Duration, passthrough bool) *snfsMount {
	t.Helper()
	return newSNFSMountWith(t, e, name, "", snfsmount.Config{WriteBackDelay: wbDelay, CloseDelay: closeDelay},
		fusefs.Options{Passthrough: passthrough})
}

// versionBytes is step k's content of the shared file: n bytes (at least 8)
// starting with k, so that a wrong read tells which version it holds.
func versionBytes(seed uint64, k, n int) []byte {
	b := randBytes(seed<<20|uint64(k), max(n, 8))
	binary.BigEndian.PutUint64(b, uint64(k))
	return b
}

// describeRead says what a read returned, against the old version.
func describeRead(got, prev []byte) string {
	switch {
	case len(got) == 0:
		return "an empty file"
	case bytes.Equal(got, prev):
		return "the old version"
	case len(got) >= 8:
		return fmt.Sprintf("a torn mix or another version (it starts as version %d)", binary.BigEndian.Uint64(got))
	}
	return "neither version"
}

// TestMountSNFSSeqShareOverlap is sequential write sharing after an
// overlapping read (issue 22, item 3): in each step, a thread of mount A
// opens and reads f while mount B rewrites it (open with O_TRUNC, write,
// close); once both are done, A opens f again and must read B's new version
// whole. With the defaults, with no delayed close, and without passthrough.
func TestMountSNFSSeqShareOverlap(t *testing.T) {
	t.Parallel()
	// SNFS_SEQSHARE_STEPS and SNFS_SEQSHARE_SEED explore further.
	steps, seed := 200, uint64(22)
	if testing.Short() {
		steps = 20
	}
	if v, err := strconv.Atoi(os.Getenv("SNFS_SEQSHARE_STEPS")); err == nil && v > 0 {
		steps = v
	}
	if v, err := strconv.ParseUint(os.Getenv("SNFS_SEQSHARE_SEED"), 10, 64); err == nil {
		seed = v
	}
	for _, c := range []struct {
		name        string
		closeDelay  time.Duration
		passthrough bool
	}{
		{"defaults", 2 * time.Second, true},
		{"close-delay=0", 0, true},
		{"passthrough=false", 2 * time.Second, false},
		{"close-delay=0,passthrough=false", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each its own server and mounts
			e := newEnv(t, "rw,no_root_squash")
			a := newSNFSMountOpts(t, e, "A", 30*time.Second, c.closeDelay, c.passthrough)
			b := newSNFSMountOpts(t, e, "B", 30*time.Second, c.closeDelay, c.passthrough)
			seqShareSteps(t, a, b, seed, steps)
		})
	}
}

// chunking is a step's I/O size: 0 (one call) or a piece size.
func chunking(r *rand.Rand) int {
	if r.IntN(2) == 0 {
		return 0
	}
	return (1 + r.IntN(32)) << 12
}

// readPieces opens p and reads it to its end, chunk bytes at a time with a
// pause between (chunk 0: in one go).
func readPieces(p string, chunk int, pause time.Duration) error {
	if chunk == 0 {
		_, err := os.ReadFile(p)
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, chunk)
	for {
		n, err := f.Read(buf)
		if err == io.EOF || n == 0 && err == nil {
			return nil
		}
		if err != nil {
			return err
		}
		time.Sleep(pause)
	}
}

// writePieces opens p with O_TRUNC, writes data chunk bytes at a time with a
// pause between (chunk 0: in one call) and closes it.
func writePieces(p string, data []byte, chunk int, pause time.Duration) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if chunk == 0 {
		chunk = len(data)
	}
	for off := 0; off < len(data) && err == nil; off += chunk {
		if off > 0 {
			time.Sleep(pause)
		}
		_, err = f.Write(data[off:min(off+chunk, len(data))])
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// seqShareSteps runs the steps of TestMountSNFSSeqShareOverlap and fails at
// the first wrong read.
func seqShareSteps(t *testing.T, a, b *snfsMount, seed uint64, steps int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	size := func() int {
		switch r.IntN(4) {
		case 0:
			return 8 + r.IntN(4096)
		case 1:
			return 8 + r.IntN(64<<10)
		}
		return 8 + r.IntN(400<<10)
	}
	prev := versionBytes(seed, 0, size())
	if err := os.WriteFile(b.path("f"), prev, 0o644); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= steps; k++ {
		next := versionBytes(seed, k, size())
		// Who starts first and by how much, and how each does its I/O: one
		// call, or pieces with pauses (a slow reader, a writer of many
		// write(2)s).
		lag := time.Duration(r.IntN(3000)) * time.Microsecond
		readerFirst := r.IntN(2) == 0
		readChunk, writeChunk := chunking(r), chunking(r)
		if writeChunk == 0 && r.IntN(2) == 0 {
			writeChunk = 4096 << r.IntN(5)
		}
		pause := time.Duration(r.IntN(300)) * time.Microsecond
		var wg sync.WaitGroup
		var readErr error
		wg.Go(func() {
			if !readerFirst {
				time.Sleep(lag)
			}
			readErr = readPieces(a.path("f"), readChunk, pause)
		})
		if readerFirst {
			time.Sleep(lag)
		}
		err := writePieces(b.path("f"), next, writeChunk, pause)
		wg.Wait()
		if err != nil {
			t.Fatalf("step %d: B's rewrite: %v", k, err)
		}
		if readErr != nil {
			t.Fatalf("step %d: A's overlapping read: %v", k, readErr)
		}
		got, err := os.ReadFile(a.path("f"))
		if err != nil {
			t.Fatalf("step %d: A's read after both: %v", k, err)
		}
		if !bytes.Equal(got, next) {
			t.Fatalf("step %d (lag %v, reader first %v, pieces %d/%d, pause %v): A reads %d bytes, %s; B wrote %d bytes (version %d), the old had %d",
				k, lag, readerFirst, readChunk, writeChunk, pause, len(got), describeRead(got, prev), len(next), k, len(prev))
		}
		prev = next
	}
}
