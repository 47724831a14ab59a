package cachedir

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The crash test's child: it runs only when this variable names a cache
// directory, writes round after round, Syncs each and reports it on stdout,
// and is killed with SIGKILL by the parent.
const crashEnv = "SNFS_CACHEDIR_CRASH_DIR"

// crashRound is round i's write: overlapping the previous rounds' ranges, on
// one of three files. dirty0 and dirty1 stay small enough to be committed
// inline (their data in the index); dirty2 starts below inlineMax and grows
// past it at round 11, so its later Syncs take the data file's fdatasync and
// drop the inline copy.
func crashRound(i int) (handle string, off int64, p []byte) {
	off = int64(i*700) + int64(i%7)*13
	if i%crashFiles == 2 {
		off += inlineMax - 8<<10
	}
	return fmt.Sprintf("dirty%d", i%crashFiles), off, pattern(byte(i), 1500)
}

const crashFiles = 3

// The clean file: filled and flushed before the rounds, then written (never
// synced) in every round, so its committed record must be retracted before
// each write touches what it claims.
const cleanSize = 64 << 10

func crashChild(dir string) {
	c, err := Open(dir, 0)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	clean, _ := c.File([]byte("clean"))
	clean.SetVersion(1, cleanSize)
	if err := clean.Fill(clean.Gen(), 0, pattern(200, cleanSize)); err != nil {
		fmt.Println("error", err)
		return
	}
	if err := c.Flush(); err != nil {
		fmt.Println("error", err)
		return
	}
	for i := 0; ; i++ {
		h, off, p := crashRound(i)
		f, _ := c.File([]byte(h))
		if _, err := f.WriteAt(p, off); err != nil {
			fmt.Println("error", err)
			return
		}
		if _, err := clean.WriteAt(p[:100], int64(i*500)%cleanSize); err != nil {
			fmt.Println("error", err)
			return
		}
		if err := f.Sync(); err != nil {
			fmt.Println("error", err)
			return
		}
		fmt.Println("synced", i)
	}
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir)
		// Wait to be killed; never close the cache.
		time.Sleep(time.Hour)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// TestCrashAfterSync kills a writer with SIGKILL at several points and checks
// that a reopened cache has every write whose Sync returned, as dirty data,
// and that no clean range claims bytes a later write changed.
func TestCrashAfterSync(t *testing.T) {
	for _, killAfter := range []int{0, 7, 12, 40} {
		t.Run(strconv.Itoa(killAfter), func(t *testing.T) { crashOnce(t, killAfter) })
	}
}

func crashOnce(t *testing.T, killAfter int) {
	dir := testDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	synced := -1
	sc := bufio.NewScanner(out)
	for synced < killAfter && sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "error") {
			cmd.Process.Kill()
			t.Fatalf("child: %s", line)
		}
		if n, ok := strings.CutPrefix(line, "synced "); ok {
			synced, _ = strconv.Atoi(n)
		}
	}
	// The child is already writing round synced+1 (or more, while this reads).
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "synced "); ok {
			synced, _ = strconv.Atoi(n)
		}
	}
	if synced < killAfter {
		t.Fatalf("child synced only %d rounds", synced)
	}

	loseUnsynced(t, dir)
	for reopen := 0; reopen < 2; reopen++ {
		// The second time, the data files restored from the index by the first
		// Open were never synced: lose them again.
		checkCrash(t, dir, synced)
		loseUnsynced(t, dir)
	}
}

// loseUnsynced does to the data files what a machine crash may do to data
// that was never fsync'd: it removes the data file of every record the index
// holds inline (its directory entry was never synced) and overwrites the
// other inline files' bytes with garbage (their data was never synced).
func loseUnsynced(t *testing.T, dir string) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, "index.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var inline [][]byte
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketInline).ForEach(func(k, _ []byte) error {
			inline = append(inline, slices.Clone(k))
			return nil
		})
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(inline) == 0 {
		t.Fatal("no record is held inline: the test loses nothing")
	}
	for i, k := range inline {
		path := filepath.Join(dir, "data", hex.EncodeToString(k))
		if i%2 == 0 {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(path, pattern(99, inlineMax), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// checkCrash opens the cache a writer was killed in after round synced's
// Sync returned, checks it and closes it.
func checkCrash(t *testing.T, dir string, synced int) {
	t.Helper()
	c := openCache(t, dir, 0)
	defer c.Close()
	// The round after synced may have made its file dirty before the kill
	// (its write is in, its Sync not answered yet): one file more.
	if n := len(c.DirtyFiles()); n < min(synced+1, crashFiles) || n > min(synced+2, crashFiles) {
		t.Fatalf("DirtyFiles: %d files after %d synced rounds (and one maybe written)", n, synced+1)
	}
	type round struct {
		h   string
		off int64
		p   []byte
	}
	rounds := make([]round, synced+3)
	for i := range rounds {
		rounds[i].h, rounds[i].off, rounds[i].p = crashRound(i)
	}
	// Bytes of rounds up to synced must be present and dirty. A byte may hold
	// a later round's value (written, not synced, before the kill) but never an
	// earlier one's.
	for j := range crashFiles {
		h := fmt.Sprintf("dirty%d", j)
		f := mustFile(t, c, h)
		info := f.Info()
		for i := 0; i <= synced; i++ {
			hi, off, p := crashRound(i)
			if hi != h {
				continue
			}
			if rangeSet(info.Dirty).within(Range{off, int64(len(p))}).total() != int64(len(p)) {
				t.Fatalf("%s: round %d's range [%d,+%d) not all dirty: %v", h, i, off, len(p), info.Dirty)
			}
		}
		if info.Size == 0 {
			continue
		}
		got := readAll(t, f, 0, info.Size)
		for b := int64(0); b < info.Size; b++ {
			last := -1 // the last synced round that wrote byte b
			for i, r := range rounds[:synced+1] {
				if r.h == h && b >= r.off && b < r.off+int64(len(r.p)) {
					last = i
				}
			}
			if last < 0 {
				continue
			}
			ok := false
			for i := last; i <= synced+2 && !ok; i++ {
				if r := rounds[i]; r.h == h && b >= r.off && b < r.off+int64(len(r.p)) {
					ok = got[b] == r.p[b-r.off]
				}
			}
			if !ok {
				t.Fatalf("%s byte %d = %d: not written by round %d or a later one (synced %d)", h, b, got[b], last, synced)
			}
		}
	}
	clean := mustFile(t, c, "clean")
	info := clean.Info()
	if len(info.Dirty) != 0 || info.Version != 1 || info.Size != cleanSize {
		t.Fatalf("clean file after crash: %+v", info)
	}
	want := pattern(200, cleanSize)
	for _, r := range info.Valid {
		equalBytes(t, fmt.Sprintf("clean range %v", r), readAll(t, clean, r.Off, r.Len), want[r.Off:r.End()])
	}
	if rangeSet(info.Valid).total() > cleanSize-int64(synced)*100 {
		t.Fatalf("clean file still claims %d bytes after %d overwrites", rangeSet(info.Valid).total(), synced+1)
	}
}
