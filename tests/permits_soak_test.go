package tests

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"runtime/pprof"
	"snfs/internal/faultproxy"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPermitsSoak is a seeded soak of write-back permits with local data
// (`snfs mount --mode=snfs --permits=on --permit-data=on`: docs/mount.md
// "The mount's side", docs/protocol.md section 21) as users live: two mount
// processes of one export and a process on the server machine (this test,
// in the export directory) change the tree at the same time, each in a loop
// of random operations: create, write and close (some with fsync), append,
// rewrite, an in-place write with fsync, rename in a directory, across its
// own directories and into another actor's home directory (handing the file
// over; a mount fsyncs the file and its directory first, so that the new
// owner's expectation does not depend on acknowledged data only a killed
// mount holds), mkdir, rmdir, unlink, fsync of a directory, and reads. Meanwhile,
// in cycles, the server or one of the mounts is killed with SIGKILL (a
// mount in the middle of whatever it is doing) and started again: the
// server on its state directory, the mount on its mount point and cache
// directory, which reintegrates the log the killed one left.
//
// The expected tree is well defined: each file and directory has one owner
// at a time, the only actor that changes it (names are fresh, never
// reused), so the last acknowledged change wins. An operation counts once
// it returned (a file's close or fsync; rename, unlink, mkdir, rmdir); one
// that failed (its mount killed under it) is retried until it succeeds,
// in a form whose outcome is the same whether or not the failed attempt took
// effect (an append becomes a rewrite of the whole; a rename whose source
// is gone and whose target exists was made). After a rename, the other
// mount looks the new name up at once (and reads the file, when its owner
// did not change: close-to-open); a name not seen at once is counted and
// waited for (a local process's read does not recall a permit:
// docs/protocol.md section 21.4),
// and so is a file handed over that its new owner does not see yet. At the end, the actors stopped, each mount's view is compared
// with the model, both mounts are unmounted cleanly, and the export
// directory, read on the server's disk, must be the model: every
// acknowledged byte there, nothing removed or renamed away left, no
// conflict copy (no real conflict is made) and nothing in either mount's
// conflicts file. It also fails if permits were never granted or no
// REINTEGRATE was sent (then it tested nothing).
//
// Bounded: SNFS_SOAK=short is a short run (soakShort of workload, about a
// minute in all under the race detector), which scripts/test.sh (CI) runs;
// SNFS_SOAK=10m (with SNFS_LONG=1) runs that long. Unset, the test is
// skipped (a plain `go test ./...` ends within Go's default timeout). Its
// runs of a few minutes found the defects its reproducers show
// (permits_soak_repro_test.go, permits_soak_lost_test.go,
// mount_recover_fsync_test.go), fixed since. SNFS_SOAK_SEED replays
// the actors' and the killer's choices, not their timing. SNFS_SOAK_DEBUG=1
// has the server and the mounts log at debug level (with SNFS_TEST_KEEP=1
// their logs stay).
// SNFS_SOAK_DELAY=1ms puts each mount's NFS and SNFS connection behind a
// proxy delaying each direction that long (a real network's round trips,
// which loopback hides; the callbacks ride the same connection).
//
// Serial: it bounds its duration (tests/doc.go), and it is the only test
// whose load is meant to run for minutes.
func TestPermitsSoak(t *testing.T) {
	v := os.Getenv("SNFS_SOAK")
	if v == "" {
		t.Skip("a soak of a minute or more: SNFS_SOAK=short runs the short run (scripts/test.sh sets it), SNFS_SOAK=10m with SNFS_LONG=1 a long one")
	}
	requireFUSE(t)
	dur := soakShort
	if v != "short" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SNFS_SOAK=%q: short, or a duration: %v", v, err)
		}
		if d > soakShort {
			requireLong(t)
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SNFS_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SNFS_SOAK_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (SNFS_SOAK_SEED replays the choices, not their timing), %v of workload", seed, dur)

	serveFlags := []string{"--grace", "5s"}
	if os.Getenv("SNFS_SOAK_DEBUG") != "" {
		serveFlags = append(serveFlags, "--log-level", "debug")
	}
	s := newServeProc(t, serveFlags...)
	sk := &soak{t: t, s: s, model: &soakModel{files: map[string]*soakFile{}, dirs: map[string]int{"s": -1}, lost: map[string]*soakFile{}},
		errs: map[string]int{}}
	homes := []string{"a", "b", "l", "s"}
	for _, d := range homes {
		if err := os.Mkdir(s.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(s.path(d), 0o777)
	}
	var delay time.Duration
	if v := os.Getenv("SNFS_SOAK_DELAY"); v != "" {
		var err error
		if delay, err = time.ParseDuration(v); err != nil || delay < 0 {
			t.Fatalf("SNFS_SOAK_DELAY=%q: a duration: %v", v, err)
		}
		t.Logf("each mount's connection delayed %v each way", delay)
	}
	for i, name := range []string{"mountA", "mountB"} {
		m := newMnt(t, "", "")
		m.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		sk.mnts = append(sk.mnts, m)
		port := s.nfsPort
		if delay > 0 {
			p := newProxy(t, s.addr())
			p.Delay(faultproxy.ClientToServer, delay)
			p.Delay(faultproxy.ServerToClient, delay)
			port = p.Port()
		}
		sk.ports = append(sk.ports, port)
		a := &soakActor{sk: sk, id: i, name: name, home: homes[i], slot: &soakSlot{}, mount: true}
		sk.actors = append(sk.actors, a)
		sk.launch(i)
		t.Cleanup(func() {
			m.stop()
			if t.Failed() {
				t.Logf("log of %s (tail):\n%s", name, tail(m.logPath, 60))
			}
		})
	}
	sk.export = s.export
	er, err := os.OpenRoot(s.export)
	if err != nil {
		t.Fatal(err)
	}
	defer er.Close()
	local := &soakActor{sk: sk, id: 2, name: "local", home: "l", slot: &soakSlot{root: er}}
	sk.actors = append(sk.actors, local)
	for _, a := range sk.actors {
		a.rng = rand.New(rand.NewPCG(seed, uint64(10+a.id)))
		a.ops = map[string]int{}
		sk.model.dirs[a.home] = a.id
	}

	// The actors, stopped (and waited for) however the test ends.
	var wg sync.WaitGroup
	for _, a := range sk.actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !sk.stop.Load() && !sk.hung.Load() && a.step() {
			}
		}()
	}
	stopped := false
	stopActors := func() {
		if stopped {
			return
		}
		stopped = true
		sk.stop.Store(true)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(soakOpTimeout + time.Minute):
			t.Errorf("the actors did not stop")
			sk.hangDump()
		}
	}
	defer stopActors()

	// The killer, on the test's goroutine.
	kr := rand.New(rand.NewPCG(seed, 2))
	for end := time.Now().Add(dur); time.Now().Before(end) && !sk.hung.Load(); {
		time.Sleep(time.Duration(1500+kr.IntN(3500)) * time.Millisecond)
		if sk.hung.Load() {
			break
		}
		if kr.IntN(3) == 0 {
			sk.killServer()
		} else {
			sk.killMount(kr.IntN(2))
		}
	}
	stopActors()
	if sk.hung.Load() {
		sk.hangDump()
		for _, m := range sk.mnts {
			m.kill9()
		}
		sk.report()
		t.FailNow()
	}

	// Quiet: each mount sends its log (a directory's fsync reintegrates),
	// then every view must be the model.
	for i, a := range sk.actors[:2] {
		for _, d := range sk.model.dirList() {
			a.fsyncDir(d)
		}
		sk.compareTree(fmt.Sprintf("%s's view before unmount", a.name), sk.actors[i].slot.peek().FS(), false)
	}
	sk.scrapeMounts()
	for i, m := range sk.mnts {
		sk.actors[i].slot.down().Close() // an open root would keep the mount busy
		if !m.stop() {
			t.Errorf("%s: the unmount was not clean", sk.actors[i].name)
		}
	}
	sk.compareTree("the export after the unmounts", os.DirFS(s.export), true)
	for i, m := range sk.mnts {
		if l := conflictLines(m); len(l) > 0 {
			sk.finding("%s's conflicts file (no real conflict was made):\n%s", sk.actors[i].name, strings.Join(l, "\n"))
		}
	}
	sk.scrapeServer()
	sk.report()
	if sk.srvMetrics["permit_grants"] == 0 || sk.mntMetrics["REINTEGRATE"] == 0 {
		t.Errorf("no permit granted (%v) or no REINTEGRATE sent (%v): the soak tested nothing", sk.srvMetrics["permit_grants"], sk.mntMetrics["REINTEGRATE"])
	}
}

// soakShort is the short run's workload.
const soakShort = 40 * time.Second

// soak is TestPermitsSoak's state.
type soak struct {
	t      *testing.T
	s      *srvProc
	mnts   []*mntProc
	ports  []int        // each mount's NFS port: the server's, or its delaying proxy's
	actors []*soakActor // mountA, mountB, local
	model  *soakModel
	next   atomic.Int64 // the last name number given
	export string       // the export's directory on this machine (what the server has)

	stop, hung  atomic.Bool
	serverEpoch atomic.Int64 // counts the server's kills and restarts
	gaveUp      atomic.Int64 // operations given up (soakActor.do)
	counts      soakCounts

	mu         sync.Mutex
	errs       map[string]int     // guarded by mu; errors the actors saw, explained by a kill, by errno
	findings   []string           // guarded by mu
	srvMetrics map[string]float64 // guarded by mu; the server's permit counters, summed over its starts
	mntMetrics map[string]float64 // guarded by mu; the mounts' calls by procedure, summed over their starts
}

// soakMountFlags are the mounts' flags (with --metrics).
var soakMountFlags = []string{"--permits=on", "--permit-data=on", "--log-level", "info"}

// launch (re)starts mount i on its mount point and cache directory.
func (sk *soak) launch(i int) {
	m := sk.mnts[i]
	flags := append(append([]string{}, soakMountFlags...), "--metrics", m.metrics)
	if os.Getenv("SNFS_SOAK_DEBUG") != "" {
		flags = append(flags, "--log-level", "debug")
	}
	m.launch(sk.s, sk.ports[i], flags...)
	r, err := os.OpenRoot(m.dir)
	if err != nil {
		sk.t.Fatal(err)
	}
	sk.actors[i].slot.up(r)
}

// killMount kills mount i with SIGKILL, whatever it is doing, and mounts
// it again.
func (sk *soak) killMount(i int) {
	sk.scrapeMount(i)
	r := sk.actors[i].slot.down()
	sk.mnts[i].kill9()
	r.Close()
	sk.counts.mountKills.Add(1)
	sk.launch(i)
}

// killServer kills the server with SIGKILL and starts it again, then waits
// for the end of its grace period (the actors' calls make the mounts
// reclaim).
func (sk *soak) killServer() {
	sk.scrapeServer()
	sk.serverEpoch.Add(1)
	if err := sk.s.kill9(); err != nil {
		sk.t.Fatal(err)
	}
	if err := sk.s.startErr(); err != nil {
		sk.t.Fatal(err)
	}
	sk.counts.serverKills.Add(1)
	for end := time.Now().Add(time.Minute); sk.s.metric("snfs_server_consist_grace_end_total") < 1; {
		if time.Now().After(end) {
			sk.t.Errorf("the restarted server's grace period did not end within a minute")
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	sk.serverEpoch.Add(1)
}

// scrapeServer adds the running server's permit counters to the run's.
func (sk *soak) scrapeServer() {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if sk.srvMetrics == nil {
		sk.srvMetrics = map[string]float64{}
	}
	for _, c := range []string{"permit_grants", "permit_refusals", "permit_recalls", "permit_revocations", "permit_waits"} {
		if v := sk.s.metric("snfs_server_consist_" + c + "_total"); v > 0 {
			sk.srvMetrics[c] += v
		}
	}
}

func (sk *soak) scrapeMounts() {
	for i := range sk.mnts {
		sk.scrapeMount(i)
	}
}

// scrapeMount adds mount i's permit calls to the run's.
func (sk *soak) scrapeMount(i int) {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if sk.mntMetrics == nil {
		sk.mntMetrics = map[string]float64{}
	}
	for _, p := range []string{"GET_PERMIT", "PERMIT_RELEASE", "REINTEGRATE", "WRITE", "OPEN", "CREATE_OPEN"} {
		if v, err := metricSum(sk.mnts[i].metrics, "snfs_client_rpc_total", "proc", p); err == nil {
			sk.mntMetrics[p] += v
		}
	}
}

// checkRename looks the renamed file up through the other mounts at once:
// the new name should be there (and, when the renamer still owns the file,
// its last acknowledged content), the old one gone. A mount's read recalls
// the renamer's permit (docs/protocol.md section 21.4): a rename made under
// one is seen at once by another mount, and a local process's within the
// server's notifier bound (docs/mount.md "Breaks", about 100 ms). So a new
// name not seen at once is counted (with the longest wait) and waited for,
// up to soakSeenBound; a finding only if it stays unseen; the local
// process's content is waited for up to a second.
func (sk *soak) checkRename(a *soakActor, from, to string) {
	k := 0
	if !a.mount {
		k = 1
	}
	c := &sk.counts
	for _, o := range sk.actors[:2] {
		if o == a {
			continue
		}
		r, epoch := o.slot.peekEpoch()
		if r == nil {
			continue
		}
		_, aEpoch := a.slot.peekEpoch()
		c.renameChecks[k].Add(1)
		if _, err := r.Lstat(from); err == nil {
			c.renameOldSeen[k].Add(1)
		}
		start := time.Now()
		_, err := r.Lstat(to)
		if err != nil {
			c.renameLate[k].Add(1)
			for err != nil && time.Since(start) < soakSeenBound && o.slot.same(epoch) && sk.model.owner(to) >= 0 {
				time.Sleep(20 * time.Millisecond)
				_, err = r.Lstat(to)
			}
			if !o.slot.same(epoch) || sk.model.owner(to) < 0 {
				continue // the mount was killed meanwhile, or the file's new owner moved it
			}
			if err != nil {
				sk.finding("%s's rename %s -> %s: %s still does not see %s after %v: %v\n%s", a.name, from, to, o.name, to, time.Since(start).Round(time.Millisecond), err, sk.model.describe(to))
				continue
			}
			ms := time.Since(start).Milliseconds()
			for m := c.renameMaxMs[k].Load(); ms > m && !c.renameMaxMs[k].CompareAndSwap(m, ms); m = c.renameMaxMs[k].Load() {
			}
		}
		if f := sk.model.owner(to); f != a.id {
			continue // handed over: its new owner may be changing it
		}
		want := sk.model.get(to)
		for {
			got, err := r.ReadFile(to)
			switch {
			case !o.slot.same(epoch):
			case !a.slot.same(aEpoch):
				c.readsKilled[k].Add(1) // the acknowledged data may be in the killed mount's cache alone
			case err == nil && bytes.Equal(got, want):
			case a.mount || time.Since(start) > time.Second:
				if err != nil {
					sk.finding("%s's rename %s -> %s: %s cannot read %s: %v", a.name, from, to, o.name, to, err)
				} else {
					sk.finding("%s's rename %s -> %s: %s reads %s: %s\n%s", a.name, from, to, o.name, to, soakDiff(got, want), sk.model.describe(to))
				}
			default:
				c.contentLate[k].Add(1)
				time.Sleep(20 * time.Millisecond)
				continue
			}
			break
		}
	}
}

// appError counts an error an actor saw, by errno, and says whether a
// kill of its mount (slot) or of the server while it ran explains it.
func (sk *soak) appError(err error, epoch int, slot *soakSlot, srvEpoch int64) bool {
	_, now := slot.peekEpoch()
	explained := now != epoch || sk.serverEpoch.Load() != srvEpoch || srvEpoch%2 == 1
	key := errnoOf(err)
	if !explained {
		key += " (unexplained)"
	}
	sk.mu.Lock()
	sk.errs[key]++
	sk.mu.Unlock()
	return explained
}

// countErr counts an error an actor saw that the protocol explains.
func (sk *soak) countErr(key string) {
	sk.mu.Lock()
	sk.errs[key]++
	sk.mu.Unlock()
}

// hang records an operation that did not return.
func (sk *soak) hang(a *soakActor, what string) {
	sk.t.Errorf("%s: %s did not return within %v", a.name, what, soakOpTimeout)
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	sk.t.Logf("the test's goroutines:\n%s", b.String())
	sk.hung.Store(true)
}

// hangDump logs the server's and the mounts' goroutines.
func (sk *soak) hangDump() {
	sk.t.Logf("the server's goroutines:\n%s", sk.s.goroutines())
	for i, m := range sk.mnts {
		sk.t.Logf("%s's goroutines:\n%s", sk.actors[i].name, m.goroutines())
	}
}

func (sk *soak) finding(format string, args ...any) {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.findings = append(sk.findings, fmt.Sprintf(time.Now().Format("15:04:05.000 ")+format, args...))
}

// onExport says whether each of paths is in the export directory now (the
// server's file system, bypassing every mount): a finding's first clue,
// whether the server or the mount's view lacks a name.
func (sk *soak) onExport(paths []string) string {
	var b strings.Builder
	for _, p := range paths {
		if fi, err := os.Lstat(filepath.Join(sk.export, p)); err == nil {
			fmt.Fprintf(&b, " %s: on the export (%d bytes);", p, fi.Size())
		} else {
			fmt.Fprintf(&b, " %s: not on the export (%v)%s;", p, err, sk.elsewhere(p))
		}
	}
	return b.String()
}

// elsewhere names the files on the export that hold what the model says p
// holds (at most 3): where a file missing at its name went.
func (sk *soak) elsewhere(p string) string {
	sk.model.mu.Lock()
	var want []byte
	if f := sk.model.files[p]; f != nil {
		want = f.data
	} else if f := sk.model.lost[p]; f != nil {
		want = f.data
	}
	sk.model.mu.Unlock()
	if len(want) == 0 {
		return ""
	}
	var found []string
	filepath.WalkDir(sk.export, func(q string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || len(found) >= 3 {
			return nil
		}
		if fi, err := d.Info(); err != nil || fi.Size() != int64(len(want)) {
			return nil
		}
		if got, err := os.ReadFile(q); err == nil && bytes.Equal(got, want) {
			rel, _ := filepath.Rel(sk.export, q)
			found = append(found, rel)
		}
		return nil
	})
	if len(found) == 0 {
		return ", its content nowhere on it"
	}
	return ", its content at " + strings.Join(found, ", ")
}

// note logs what is worth knowing and is no finding.
func (sk *soak) note(format string, args ...any) {
	if testing.Verbose() {
		sk.t.Logf(format, args...)
	}
}

// compareTree compares the tree fsys shows with the model.
func (sk *soak) compareTree(who string, fsys fs.FS, final bool) {
	seenF, seenD := map[string]bool{}, map[string]bool{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			sk.finding("%s: %s: %v", who, p, err)
			return nil
		}
		if p == "." {
			return nil
		}
		if i := strings.Index(p, ".snfs-conflict"); i >= 0 {
			sk.finding("%s: a conflict copy %s (no real conflict was made); %s: %s\nthe mounts' log lines naming it:\n%s",
				who, p, p[:i], sk.model.describe(p[:i]), sk.logLines(path.Base(p[:i])))
			return nil
		}
		if d.IsDir() {
			seenD[p] = true
			if !sk.model.hasDir(p) {
				sk.finding("%s: directory %s exists; the model has none", who, p)
			}
			return nil
		}
		seenF[p] = true
		want, ok := sk.model.lookup(p)
		if !ok && sk.model.isLost(p) {
			return nil // given up, reported already
		}
		if !ok {
			sk.finding("%s: %s exists; the model has none (removed or renamed away)", who, p)
			return nil
		}
		got, err := fs.ReadFile(fsys, p)
		if err != nil {
			sk.finding("%s: reading %s: %v", who, p, err)
		} else if !bytes.Equal(got, want) {
			sk.finding("%s: %s: %s\n%s", who, p, soakDiff(got, want), sk.model.describe(p))
		}
		return nil
	})
	if err != nil {
		sk.finding("%s: walk: %v", who, err)
	}
	for _, p := range sk.model.fileList() {
		if !seenF[p] {
			sk.finding("%s: %s is missing (LOST)\n%s", who, p, sk.model.describe(p))
		}
	}
	for _, d := range sk.model.dirList() {
		if !seenD[d] {
			sk.finding("%s: directory %s is missing", who, d)
		}
	}
	if final {
		sk.t.Logf("%s: %d files, %d directories compared", who, len(seenF), len(seenD))
	}
}

// logLines are the mounts' log lines that name name (a path's last
// element), for a finding.
func (sk *soak) logLines(name string) string {
	var b strings.Builder
	for i, m := range sk.mnts {
		data, _ := os.ReadFile(m.logPath)
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "/"+name+" ") || strings.Contains(l, "/"+name+"\"") || strings.Contains(l, "\""+name+"\"") || strings.Contains(l, "="+name+" ") {
				fmt.Fprintf(&b, "  %s: %s\n", sk.actors[i].name, l)
			}
		}
	}
	return b.String()
}

// report logs the run's figures and fails the test with its findings.
func (sk *soak) report() {
	t := sk.t
	total := 0
	for _, a := range sk.actors {
		n := 0
		kinds := make([]string, 0, len(a.ops))
		for k, v := range a.ops {
			n += v
			kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(kinds)
		total += n
		t.Logf("%s: %d acknowledged operations (%s)", a.name, n, strings.Join(kinds, ", "))
	}
	sk.mu.Lock()
	defer sk.mu.Unlock()
	t.Logf("%d operations; %d kills (%d of a mount, %d of the server); errors the actors saw (retried): %v",
		total, sk.counts.mountKills.Load()+sk.counts.serverKills.Load(), sk.counts.mountKills.Load(), sk.counts.serverKills.Load(), sk.errs)
	c := &sk.counts
	for k, who := range []string{"a mount", "the local process"} {
		t.Logf("renames by %s looked up through another mount at once: %d; new name not seen at once %d (longest wait %d ms), old name still seen %d; content read late %d times, not compared %d times (the renamer killed)",
			who, c.renameChecks[k].Load(), c.renameLate[k].Load(), c.renameMaxMs[k].Load(), c.renameOldSeen[k].Load(), c.contentLate[k].Load(), c.readsKilled[k].Load())
	}
	t.Logf("server permit counters (summed over its starts): %v; the mounts' calls: %v", sk.srvMetrics, sk.mntMetrics)
	t.Logf("operations given up (an error no kill explains, for %v): %d", soakGiveUp, sk.gaveUp.Load())
	if len(sk.findings) > 0 {
		p := filepath.Join(diskTempDir(t, "snfs-soak-findings-"), "findings.txt")
		os.WriteFile(p, []byte(strings.Join(sk.findings, "\n")+"\n"), 0o644)
		t.Logf("every finding is in %s (SNFS_TEST_KEEP=1 keeps it)", p)
	}
	for i, f := range sk.findings {
		if i == 60 {
			t.Errorf("... and %d more findings", len(sk.findings)-60)
			break
		}
		t.Errorf("FINDING: %s", f)
	}
}

func (m *soakModel) owner(p string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.files[p]; f != nil {
		return f.owner
	}
	return -2
}

func (m *soakModel) lookup(p string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[p]
	if !ok {
		return nil, false
	}
	return f.data, true
}

func (m *soakModel) hasDir(p string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.dirs[p]
	return ok
}

func (m *soakModel) fileList() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := make([]string, 0, len(m.files))
	for p := range m.files {
		l = append(l, p)
	}
	sort.Strings(l)
	return l
}

// dirList lists the directories, parents first.
func (m *soakModel) dirList() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := make([]string, 0, len(m.dirs))
	for p := range m.dirs {
		l = append(l, p)
	}
	sort.Slice(l, func(i, j int) bool {
		if a, b := strings.Count(l[i], "/"), strings.Count(l[j], "/"); a != b {
			return a < b
		}
		return l[i] < l[j]
	})
	return l
}
