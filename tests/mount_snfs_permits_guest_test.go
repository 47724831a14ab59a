package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// removedNames returns up to k names whose remove returned before t0, in a
// seeded choice.
func (h *nameHistory) removedNames(r *rand.Rand, t0 time.Time, k int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var c []string
	for n, at := range h.rmDone {
		if at.Before(t0) {
			c = append(c, n)
		}
	}
	sort.Strings(c)
	r.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
	return c[:min(k, len(c))]
}

// removingBefore reports whether name's remove began before end.
func (h *nameHistory) removingBefore(name string, end time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.rmBegun[name]
	return ok && b.Before(end)
}

// madeAfter counts the names made after path's ctime (zero if it is not
// there): a figure for the log, which shows where the other's change fell in
// the holder's burst.
func (h *nameHistory) madeAfter(path string) int {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	c := time.Unix(st.Ctim.Unix())
	h.mu.Lock()
	defer h.mu.Unlock()
	k := 0
	for _, at := range h.made {
		if at.After(c) {
			k++
		}
	}
	return k
}

// TestMountSNFSPermitsLinuxGuestMidBurst: TestMountSNFSPermitsStockClientMidBurst
// with the stock Linux kernel NFSv3 client (the guest, tests/guest/permits.sh)
// as the other client. Mount A (--permits=on) makes files and directories in
// d locally under d's permit, writes into some and removes some, in batches;
// between two batches the guest takes its turn: it creates d/guest.N (held
// until A's permit is recalled and A's log is in), lists d and stats names A
// made (they exist) and names A removed (they do not), all chosen before the
// host's t0. In odd rounds A goes on with its next batch from t0 (the recall
// comes in the middle of A's creates); in even rounds only once the guest has
// answered (the recall's reintegration alone brings A's batch in). Every name
// A's application was told exists before t0 is listed (unless its remove
// began before the guest answered), no name removed before t0 is; A sees the
// guest's file at once in its lookup and its listing (the guest's create was
// answered only once A's permit was recalled, and with it went A's right to
// answer for d's names itself) and keeps working (asking the permit again). Once A is done and
// has fsynced d, the server, A and the guest list the same names. Seeded
// (SNFS_PERMITS_SEED replays A's burst and the names chosen, not their
// timing).
func TestMountSNFSPermitsLinuxGuestMidBurst(t *testing.T) {
	// Serial (no t.Parallel): the Linux guest.
	requireRoot(t)
	run := guestRunner(t)
	seed := burstSeed(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.MkdirAll(e.path("sync"), 0o777); err != nil {
		t.Fatal(err)
	}
	const pre = 20
	h := newBurstDir(t, e, pre)
	a := newPermitsMount(t, e, "permits-guest-a", "")
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}

	// The guest, for all rounds. noac,lookupcache=none: the handshake files
	// in sync/ are made by this process on the server's disk, and the Linux
	// client would answer its lookups of them from its negative dentries and
	// its cached attributes of sync/ (up to acdirmax); and it would answer
	// the stats of d's names from dentries and attributes it cached in an
	// earlier round. Those are the Linux client's own close-to-open rules,
	// not what this test checks: what the server answers it.
	script, err := filepath.Abs("guest/permits.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := command(run, "--host-root", "--mem", "512M", "--timeout", "300", "--opts", "noac,lookupcache=none",
		"--port", fmt.Sprint(e.port()), "--mountport", fmt.Sprint(e.port()), "--export", e.dir, script)
	// Its own process group, killed whole if the test ends first (run.sh
	// starts the guest kernel and slirp as its children).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var transcript bytes.Buffer
	cmd.Stdout, cmd.Stderr = &transcript, &transcript
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	guestDone := make(chan error, 1)
	go func() { guestDone <- cmd.Wait() }()
	const n, rounds = 600, 4
	guestEnded := false
	t.Cleanup(func() {
		if guestEnded {
			return
		}
		// The test ended first: every round the guest may wait for says
		// "end", and it unmounts and stops; if it does not (a call that
		// never returns), its process group is killed (the leftovers'
		// sweep finds what run.sh started in groups of their own).
		for k := range rounds + 1 {
			if name := e.path(fmt.Sprintf("sync/go.%d", k)); !fileExists(name) {
				os.WriteFile(name, []byte("end\n"), 0o644)
			}
		}
		select {
		case <-guestDone:
		case <-time.After(time.Minute):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-guestDone
		}
	})
	// waitFile waits for the guest to make sync/name (bounded; the guest's
	// end fails the test with its transcript).
	waitFile := func(name string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if _, err := os.Stat(e.path("sync/" + name)); err == nil {
				return
			}
			select {
			case err := <-guestDone:
				guestEnded = true
				t.Fatalf("the guest ended before making sync/%s: %v\n%s", name, err, transcript.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no sync/%s from the guest after 2 minutes", name)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// tell writes sync/name whole (a rename: the guest never reads it half
	// written).
	tell := func(name, body string) {
		t.Helper()
		tmp := e.path("sync/" + name + ".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, e.path("sync/"+name)); err != nil {
			t.Fatal(err)
		}
	}

	// A's burst: n operations, seeded, paused at each round's boundary until
	// the guest is ready for its turn.
	progress := make(chan int, n)
	errc := make(chan error, 1)
	paused, resume, stop := make(chan int), make(chan struct{}), make(chan struct{})
	var at atomic.Int64 // operations A has begun
	gate := func(k int) bool {
		at.Store(int64(k))
		if b := n / (rounds + 1); k == 0 || k%b != 0 || k/b > rounds {
			return true
		}
		select {
		case paused <- k:
		case <-stop:
			return false
		}
		select {
		case <-resume:
			return true
		case <-stop:
			return false
		}
	}
	go permitsBurst(a, h, seed, pre, n, progress, errc, gate)
	t.Cleanup(func() {
		close(stop)
		for range progress {
		}
	})

	r := rand.New(rand.NewPCG(seed, 2))
	for round := range rounds {
		select {
		case <-paused:
		case err := <-errc:
			t.Fatalf("A's burst ended early: %v", err)
		}
		waitFile(fmt.Sprintf("ready.%d", round))
		t0 := time.Now()
		// Names to stat: some A made (files and directories), some A removed.
		var exist []string
		for range 4 {
			for _, file := range []bool{true, false} {
				if f := h.pick(r, t0, file); f != "" {
					exist = append(exist, f)
				}
			}
		}
		gone := h.removedNames(r, t0, 4)
		began := at.Load()
		own := fmt.Sprintf("guest.%d", round)
		// Odd rounds: A goes on with its burst before the guest's create,
		// whose recall comes in the middle of A's creates. Even rounds: A
		// waits until the guest has answered: the recall finds A's log
		// holding its last batch, and only the recall's reintegration
		// brings it to the server before the guest's create and listing
		// (A's own next change or lookup would bring it too).
		concurrent := round%2 == 1
		if concurrent {
			resume <- struct{}{}
		}
		tell(fmt.Sprintf("go.%d", round), strings.Join(append(append([]string(nil), exist...), gone...), "\n")+"\n")
		waitFile(fmt.Sprintf("done.%d", round))
		end := time.Now()
		t.Logf("round %d: A had begun %d operations when the guest's turn began, %d when it ended; %d of A's names came after the guest's file (its ctime on the server)",
			round, began, at.Load(), h.madeAfter(e.path("d/"+own)))

		// A sees the guest's file at once, in its lookup and its listing.
		if _, err := os.Stat(a.path("d/" + own)); err != nil {
			t.Errorf("round %d: A's lookup of d/%s, which the guest made: %v", round, own, err)
		}
		if ents, err := os.ReadDir(a.path("d")); err != nil {
			t.Errorf("round %d: A's listing of d: %v", round, err)
		} else if !slices.ContainsFunc(ents, func(en os.DirEntry) bool { return en.Name() == own }) {
			t.Errorf("round %d: A's listing of d lacks %s, which the guest made", round, own)
		}
		if !concurrent {
			resume <- struct{}{}
		}

		out, err := os.ReadFile(e.path(fmt.Sprintf("sync/ls.%d", round)))
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, name := range strings.Fields(string(out)) {
			listed[name] = true
		}
		if !listed[own] {
			t.Errorf("round %d: the guest does not list its own %s", round, own)
		}
		missing, stale := h.check(listed, t0, end)
		if len(missing) > 0 || len(stale) > 0 {
			t.Errorf("round %d (after %d of A's operations): the Linux client's listing lacks %v and lists removed %v", round, began, missing, stale)
		}
		out, err = os.ReadFile(e.path(fmt.Sprintf("sync/stat.%d", round)))
		if err != nil {
			t.Fatal(err)
		}
		stats := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if name, st, ok := strings.Cut(line, " "); ok {
				stats[name] = st
			}
		}
		for _, name := range exist {
			want := "regular"
			h.mu.Lock()
			if h.dirs[name] {
				want = "directory"
			}
			h.mu.Unlock()
			if st := stats[name]; !strings.HasPrefix(st, want) && !h.removingBefore(name, end) {
				t.Errorf("round %d: the Linux client's stat of d/%s, which A made before: %q, want a %s", round, name, st, want)
			}
		}
		for _, name := range gone {
			if st := stats[name]; st != "gone" {
				t.Errorf("round %d: the Linux client's stat of d/%s, which A removed before: %q, want it gone", round, name, st)
			}
		}
	}
	endBurst(t, a, progress, errc)

	// Everyone lists the same names: A's live ones and the guest's.
	waitFile(fmt.Sprintf("ready.%d", rounds))
	tell(fmt.Sprintf("go.%d", rounds), "end\n")
	waitFile("final")
	err = <-guestDone
	guestEnded = true
	if err != nil || !strings.Contains(transcript.String(), "script status: 0") || !strings.Contains(transcript.String(), "all checks passed") {
		t.Fatalf("guest permits.sh: %v\n%s", err, transcript.String())
	}
	var others []string
	for round := range rounds {
		others = append(others, fmt.Sprintf("guest.%d", round))
	}
	out, err := os.ReadFile(e.path("sync/final"))
	if err != nil {
		t.Fatal(err)
	}
	sameNames(t, h.live(others), map[string]string{"the server": e.path("d"), "A": a.path("d")},
		map[string][]string{"the Linux client": strings.Fields(string(out))})
}

// fileExists reports whether name exists.
func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}
