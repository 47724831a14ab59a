package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"snfs/mount/cachemgr"
)

// A stock client and a local process beside a mount that makes a
// directory's changes locally under its write-back permit (issue 26's "two
// mounts, a stock client and a local process"; docs/protocol.md section
// 21.4): what the others must see is what the holder's application was
// told before their own read or change of the directory: it recalls the
// permit, and the holder's log is in before it is answered (a stock
// client's call is held until then; a local process's change is not, and
// its recall follows within the notifier's delay; a local process's read
// sees the server's directory).

// nameHistory is what the holder's application was told, by name (every
// name is made once): when its create returned, when its remove began and
// when it returned (zero: not yet).
type nameHistory struct {
	mu                    sync.Mutex
	made, rmBegun, rmDone map[string]time.Time
	dirs                  map[string]bool
}

func (h *nameHistory) set(m map[string]time.Time, name string) {
	h.mu.Lock()
	m[name] = time.Now()
	h.mu.Unlock()
}

// check compares a listing taken after t0 (the other's change was sent
// then) and completed at end with the history: every name made before t0
// whose remove had not begun by end is listed; no name removed before t0
// is.
func (h *nameHistory) check(listed map[string]bool, t0, end time.Time) (missing, stale []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for n, at := range h.made {
		if !at.Before(t0) {
			continue
		}
		if b, ok := h.rmBegun[n]; ok && b.Before(end) {
			continue
		}
		if !listed[n] {
			missing = append(missing, n)
		}
	}
	for n, at := range h.rmDone {
		if at.Before(t0) && listed[n] {
			stale = append(stale, n)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	return missing, stale
}

// pick returns a name made before t0 and not being removed, a file when
// file, or "".
func (h *nameHistory) pick(r *rand.Rand, t0 time.Time, file bool) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var c []string
	for n, at := range h.made {
		if _, rm := h.rmBegun[n]; !rm && at.Before(t0) && h.dirs[n] != file {
			c = append(c, n)
		}
	}
	if len(c) == 0 {
		return ""
	}
	sort.Strings(c)
	return c[r.IntN(len(c))]
}

// removing reports whether name's remove has begun.
func (h *nameHistory) removing(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.rmBegun[name]
	return ok
}

// removedFile returns a file removed before t0, or "".
func (h *nameHistory) removedFile(t0 time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var c []string
	for n, at := range h.rmDone {
		if at.Before(t0) && !h.dirs[n] {
			c = append(c, n)
		}
	}
	sort.Strings(c)
	if len(c) == 0 {
		return ""
	}
	return c[0]
}

// permitsBurst is the holder's burst: n operations in a.path("d"), seeded
// (creates, files with data, mkdirs, removes of names made before or of the
// pre names oldNN there before), each recorded in h as the application is
// told of it. Before operation k it calls gate(k) (nil: none), and stops if
// that returns false; after it, it sends k+1 on progress. It closes progress and sends its end (nil or the
// first error) on errc.
func permitsBurst(a *snfsMount, h *nameHistory, seed uint64, pre, n int, progress chan<- int, errc chan<- error, gate func(k int) bool) {
	defer close(progress)
	r := rand.New(rand.NewPCG(seed, 1))
	var live []string // names made (or there before) and not removed
	for k := range pre {
		live = append(live, fmt.Sprintf("old%02d", k))
	}
	for k := range n {
		if gate != nil && !gate(k) {
			errc <- fmt.Errorf("stopped before operation %d", k)
			return
		}
		switch x := r.IntN(10); {
		case x < 5 || len(live) == 0: // create (and close) a file
			name := fmt.Sprintf("f%04d", k)
			f, err := os.Create(a.path("d/" + name))
			if err == nil {
				err = f.Close()
			}
			if err != nil {
				errc <- fmt.Errorf("create %s: %w", name, err)
				return
			}
			h.set(h.made, name)
			live = append(live, name)
		case x < 6: // a file with data (a write resolves it)
			name := fmt.Sprintf("w%04d", k)
			if err := os.WriteFile(a.path("d/"+name), []byte(name), 0o644); err != nil {
				errc <- fmt.Errorf("write %s: %w", name, err)
				return
			}
			h.set(h.made, name)
			live = append(live, name)
		case x < 8: // mkdir
			name := fmt.Sprintf("d%04d", k)
			if err := os.Mkdir(a.path("d/"+name), 0o755); err != nil {
				errc <- fmt.Errorf("mkdir %s: %w", name, err)
				return
			}
			h.mu.Lock()
			h.dirs[name] = true
			h.mu.Unlock()
			h.set(h.made, name)
			live = append(live, name)
		default: // remove a name made before (or there before)
			j := r.IntN(len(live))
			name := live[j]
			live = append(live[:j], live[j+1:]...)
			h.set(h.rmBegun, name)
			if err := os.Remove(a.path("d/" + name)); err != nil {
				errc <- fmt.Errorf("remove %s: %w", name, err)
				return
			}
			h.set(h.rmDone, name)
		}
		progress <- k + 1
	}
	errc <- nil
}

// nfsLs lists dir (a libnfs URL) with nfs-ls: its names.
func nfsLs(t *testing.T, ls, url string) map[string]bool {
	t.Helper()
	out, err := command(ls, url).CombinedOutput()
	if err != nil {
		t.Fatalf("nfs-ls: %v\n%s", err, out)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names[f[len(f)-1]] = true
		}
	}
	return names
}

// TestMountSNFSPermitsStockClientMidBurst: mount A (--permits=on) makes
// files and directories in d locally under d's permit, writes into some
// (which resolves them: a reintegration), removes some; in the middle of
// that burst a libnfs client, a process on the server machine and another
// mount take turns changing d (libnfs and the mount: a create, which is
// held until A's permit is recalled; the local process: a create in the
// export, which recalls it after the fact) and then listing it (nfs-ls;
// the local process's readdir; the mount's) and looking names up (nfs-cat;
// the mount's stat): every name A's application was told exists before
// that change is listed and found, no name it removed before is. A keeps
// working after each recall (asking the permit again), and once it is done
// and has fsynced d, the server, libnfs and both mounts list the same
// names. Seeded (SNFS_PERMITS_SEED replays A's burst and the checks'
// choices, not their timing).
func TestMountSNFSPermitsStockClientMidBurst(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	ls, cat := requireTool(t, "nfs-ls"), requireTool(t, "nfs-cat")
	op := requireLibnfsOp(t)
	seed := burstSeed(t)
	e := newEnv(t, "rw,no_root_squash")
	const pre = 20
	h := newBurstDir(t, e, pre)
	a := newPermitsMount(t, e, "permits-stock-a", "")
	b := newSNFSMount(t, e, "permits-stock-b", "", time.Hour)
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}

	// A's burst: n operations, seeded.
	const n, rounds = 600, 6
	progress := make(chan int, n)
	errc := make(chan error, 1)
	go permitsBurst(a, h, seed, pre, n, progress, errc, nil)

	// The others' turns, in the middle of the burst.
	r := rand.New(rand.NewPCG(seed, 2))
	dirURL := libnfsURL(e, e.dir+"/d")
	done := 0
	for round := range rounds {
		for done < (round+1)*n/(rounds+2) {
			k, ok := <-progress
			if !ok {
				t.Fatalf("A's burst ended early: %v", <-errc)
			}
			done = k
		}
		t0 := time.Now()
		switch round % 3 {
		case 2:
			// Another mount: its create waits for the recall, as
			// libnfs's; then its listing (LISTDIR, not promised while
			// A holds the permit again, or promised) and lookups.
			name := fmt.Sprintf("mount%d", round)
			if err := os.WriteFile(b.path("d/"+name), []byte(name), 0o644); err != nil {
				t.Fatal(err)
			}
			ents, err := os.ReadDir(b.path("d"))
			if err != nil {
				t.Fatal(err)
			}
			listed := map[string]bool{}
			for _, en := range ents {
				listed[en.Name()] = true
			}
			missing, stale := h.check(listed, t0, time.Now())
			if len(missing) > 0 || len(stale) > 0 {
				t.Errorf("round %d (after %d of A's operations): mount B's listing lacks %v and lists removed %v", round, done, missing, stale)
			}
			if f := h.pick(r, t0, false); f != "" {
				if _, err := os.Stat(b.path("d/" + f)); err != nil && !h.removing(f) {
					t.Errorf("round %d: mount B's lookup of %s, which A made before: %v", round, f, err)
				}
			}
		case 0:
			// libnfs: a create of d (held until A's permit is recalled and
			// its log is in), then a listing and lookups.
			name := fmt.Sprintf("libnfs%d", round)
			c := command(op, "write", libnfsURL(e, e.dir+"/d/"+name), "0", "create")
			c.Stdin = bytes.NewReader([]byte(name))
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("nfs-op write %s: %v\n%s", name, err, out)
			}
			listed := nfsLs(t, ls, dirURL)
			missing, stale := h.check(listed, t0, time.Now())
			if !listed[name] {
				t.Errorf("round %d: libnfs does not list its own %s", round, name)
			}
			if len(missing) > 0 || len(stale) > 0 {
				t.Errorf("round %d (after %d of A's operations): libnfs's listing lacks %v and lists removed %v", round, done, missing, stale)
			}
			if f := h.pick(r, t0, true); f != "" {
				if out, err := command(cat, libnfsURL(e, e.dir+"/d/"+f)).CombinedOutput(); err != nil {
					if !h.removing(f) {
						t.Errorf("round %d: nfs-cat of %s, which A made before: %v\n%s", round, f, err, out)
					}
				}
			}
			if f := h.removedFile(t0); f != "" {
				if out, err := command(cat, libnfsURL(e, e.dir+"/d/"+f)).CombinedOutput(); err == nil {
					t.Errorf("round %d: nfs-cat of %s, which A removed before, reads %q", round, f, out)
				}
			}
		default:
			// A process on the server machine: its create is not held; the
			// recall follows it (the change notifier), and A's log is then
			// in. Its listings, until they show that (bounded).
			// A child: the server is in this process, and tells its own
			// changes from other processes' by process.
			name := fmt.Sprintf("local%d", round)
			if out, err := command("touch", e.path("d/"+name)).CombinedOutput(); err != nil {
				t.Fatalf("touch: %v: %s", err, out)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				ents, err := os.ReadDir(e.path("d"))
				if err != nil {
					t.Fatal(err)
				}
				listed := map[string]bool{}
				for _, en := range ents {
					listed[en.Name()] = true
				}
				missing, stale := h.check(listed, t0, time.Now())
				if len(missing) == 0 && len(stale) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("round %d (after %d of A's operations): 10 s after a local process's change, the export lacks %v and holds removed %v",
						round, done, missing, stale)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	endBurst(t, a, progress, errc)

	// Everyone lists the same names: A's live ones and the others'.
	var others []string
	for round := range rounds {
		others = append(others, fmt.Sprintf("%s%d", []string{"libnfs", "local", "mount"}[round%3], round))
	}
	var libnfs []string
	for name := range nfsLs(t, ls, dirURL) {
		libnfs = append(libnfs, name)
	}
	want := h.live(others)
	sameNames(t, want, map[string]string{"the server": e.path("d"), "A": a.path("d"), "B": b.path("d")},
		map[string][]string{"libnfs": libnfs})
	// The files A wrote hold their data (on the server, after the fsync
	// and its write-back at unmount is not needed: each was resolved).
	for _, name := range want {
		if strings.HasPrefix(name, "w") {
			if got, err := os.ReadFile(a.path("d/" + name)); err != nil || string(got) != name {
				t.Errorf("A reads d/%s: %q, %v", name, got, err)
			}
		}
	}
}

// burstSeed is the seed of a burst test's choices: SNFS_PERMITS_SEED, or
// the time.
func burstSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SNFS_PERMITS_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (SNFS_PERMITS_SEED)", seed)
	return seed
}

// newBurstDir makes the directory d in e's export with pre files old00...
// (holding "old"), and returns the history of A's names, which begins with
// them.
func newBurstDir(t *testing.T, e *env, pre int) *nameHistory {
	t.Helper()
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	h := &nameHistory{made: map[string]time.Time{}, rmBegun: map[string]time.Time{}, rmDone: map[string]time.Time{},
		dirs: map[string]bool{}}
	for k := range pre {
		name := fmt.Sprintf("old%02d", k)
		if err := os.WriteFile(e.path("d/"+name), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		h.made[name] = time.Time{}
	}
	return h
}

// endBurst waits for the end of A's burst (permitsBurst's progress and
// error), then fsyncs A's d: its log is reintegrated.
func endBurst(t *testing.T, a *snfsMount, progress <-chan int, errc <-chan error) {
	t.Helper()
	for range progress {
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Logf("A made %d changes locally", cachemgr.StatsOf(a.v).LocalChanges.Load())
	dir, err := os.Open(a.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatal(err)
	}
	dir.Close()
}

// live returns the names A made and did not remove, with others, sorted.
func (h *nameHistory) live(others []string) []string {
	var want []string
	h.mu.Lock()
	for name := range h.made {
		if _, rm := h.rmDone[name]; !rm {
			want = append(want, name)
		}
	}
	h.mu.Unlock()
	want = append(want, others...)
	sort.Strings(want)
	return want
}

// sameNames checks that each view of d lists exactly want: the directories
// at paths (read here), and the listings of other clients (listed, "." and
// ".." left out), by who.
func sameNames(t *testing.T, want []string, paths map[string]string, listed map[string][]string) {
	t.Helper()
	views := map[string][]string{}
	for who, path := range paths {
		ents, err := os.ReadDir(path)
		if err != nil {
			t.Fatal(err)
		}
		views[who] = []string{} // an empty view is compared too
		for _, en := range ents {
			views[who] = append(views[who], en.Name())
		}
	}
	for who, names := range listed {
		views[who] = []string{}
		for _, name := range names {
			if name != "." && name != ".." {
				views[who] = append(views[who], name)
			}
		}
		sort.Strings(views[who])
	}
	for who, got := range views {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s lists %d names; want %d:\n got %v\nwant %v", who, len(got), len(want), got, want)
		}
	}
}
