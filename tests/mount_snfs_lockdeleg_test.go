package tests

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"snfs/mount/cachemgr"
	"snfs/nlm4"
	"snfs/server"

	"golang.org/x/sys/unix"
)

// Lock delegation (docs/protocol.md, "Lock delegation"; server/lockdeleg.go,
// mount/vfs/lockdeleg.go): the one mount using a file serves its locks
// itself, and hands them back before another mount's OPEN or LOCK, any NLM
// request, or a local process's open is served. Every lock user here but
// the NLM client is a process of its own (a locker: the test binary run
// again), so that a local process is not the server's own process.

// newDelegEnv is a server with lock delegation on and an NLM host side.
func newDelegEnv(t *testing.T) (*env, *nlmHostSide) {
	t.Helper()
	requireRoot(t)
	h := newNLMHostSide(t)
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.ClientRPCBindPort, c.LockDelegation = h.pmapPort, true })
	return e, h
}

// locker is a process that opens a file and locks it with fcntl (POSIX
// locks: the process is the owner) as told on its standard input, one
// command a line, answering each on its standard output.
type locker struct {
	t    *testing.T
	name string
	cmd  *spawnCmd
	in   *bufio.Writer
	out  chan string
}

func startLocker(t *testing.T, name, path string) *locker {
	t.Helper()
	cmd := command(os.Args[0], "-test.run=^TestLockDelegLocker$")
	cmd.Env = append(os.Environ(), "SNFS_LOCKER="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &locker{t: t, name: name, cmd: cmd, in: bufio.NewWriter(stdin), out: make(chan string, 4)}
	go func() { // ends at the locker's exit (EOF)
		r := bufio.NewReader(stdout)
		for {
			s, err := r.ReadString('\n')
			if s = strings.TrimSpace(s); strings.HasPrefix(s, "> ") {
				l.out <- strings.TrimPrefix(s, "> ")
			}
			if err != nil {
				close(l.out)
				return
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
		}
	})
	return l
}

// send sends a command without waiting for its answer.
func (l *locker) send(cmd string) {
	l.t.Helper()
	fmt.Fprintln(l.in, cmd)
	if err := l.in.Flush(); err != nil {
		l.t.Fatalf("locker %s: %v", l.name, err)
	}
}

// answer waits for the answer to the last command.
func (l *locker) answer() string {
	l.t.Helper()
	select {
	case s, ok := <-l.out:
		if !ok {
			l.t.Fatalf("locker %s exited", l.name)
		}
		return s
	case <-time.After(60 * time.Second): // a failure bound, not a speed assertion
		l.t.Fatalf("locker %s: no answer", l.name)
	}
	panic("unreachable")
}

func (l *locker) do(cmd string) string {
	l.t.Helper()
	l.send(cmd)
	return l.answer()
}

func (l *locker) want(cmd, want string) {
	l.t.Helper()
	if got := l.do(cmd); got != want {
		l.t.Fatalf("locker %s: %q answered %q, want %q", l.name, cmd, got, want)
	}
}

// TestLockDelegLocker is the locker's body. Commands: "open", "close",
// "write TEXT" (at offset 0), "read N" (from offset 0: the bytes read),
// "lock r|w START LEN" (F_SETLK: ok or eagain), "wait r|w START LEN"
// (F_SETLKW), "unlock START LEN", "test r|w START LEN" (F_GETLK: none, or
// the holder's "r|w START LEN").
func TestLockDelegLocker(t *testing.T) {
	t.Parallel()
	path := os.Getenv("SNFS_LOCKER")
	if path == "" {
		t.Skip("the locker process of the lock delegation tests")
	}
	var f *os.File
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		ans := "ok"
		num := func(i int) int64 { v, _ := strconv.ParseInt(w[i], 10, 64); return v }
		typ := func() int16 {
			if w[1] == "w" {
				return unix.F_WRLCK
			}
			return unix.F_RDLCK
		}
		var err error
		switch w[0] {
		case "open":
			f, err = os.OpenFile(path, os.O_RDWR, 0)
		case "close":
			err = f.Close()
		case "write":
			_, err = f.WriteAt([]byte(w[1]), 0)
		case "read":
			b := make([]byte, num(1))
			var n int
			n, err = f.ReadAt(b, 0)
			ans = string(b[:n])
			if n > 0 {
				err = nil
			}
		case "lock", "wait":
			fl := unix.Flock_t{Type: typ(), Start: num(2), Len: num(3)}
			cmd := unix.F_SETLK
			if w[0] == "wait" {
				cmd = unix.F_SETLKW
			}
			err = unix.FcntlFlock(f.Fd(), cmd, &fl)
		case "unlock":
			fl := unix.Flock_t{Type: unix.F_UNLCK, Start: num(1), Len: num(2)}
			err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &fl)
		case "test":
			fl := unix.Flock_t{Type: typ(), Start: num(2), Len: num(3)}
			if err = unix.FcntlFlock(f.Fd(), unix.F_GETLK, &fl); err == nil {
				ans = "none"
				if fl.Type != unix.F_UNLCK {
					k := "r"
					if fl.Type == unix.F_WRLCK {
						k = "w"
					}
					ans = fmt.Sprintf("%s %d %d", k, fl.Start, fl.Len)
				}
			}
		}
		switch {
		case errors.Is(err, unix.EAGAIN):
			ans = "eagain"
		case err != nil:
			ans = "error " + err.Error()
		}
		fmt.Println("> " + ans)
	}
}

// delegations is what mount m was granted and had recalled.
func delegations(m *snfsMount) (granted, recalled uint64) {
	st := cachemgr.StatsOf(m.v)
	return st.LockDelegations.Load(), st.LockRecalls.Load()
}

func wantDelegations(t *testing.T, m *snfsMount, granted, recalled uint64) {
	t.Helper()
	if g, r := delegations(m); g != granted || r != recalled {
		t.Fatalf("mount: %d delegations granted, %d recalled; want %d, %d", g, r, granted, recalled)
	}
}

// TestMountSNFSLockDelegation: A's locks are served by A alone while it is
// the file's only user, and exclude B, a local process and an NLM client
// once they come, exactly as A's locks held then: ranges A unlocked while it
// held the delegation are free, those it locked are held.
func TestMountSNFSLockDelegation(t *testing.T) {
	t.Parallel()
	e, h := newDelegEnv(t)
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	for _, name := range []string{"b", "local", "nlm"} {
		os.WriteFile(e.path(name), nil, 0o666)
	}

	// Another mount: B's open recalls; its F_SETLK meets what A holds.
	a1 := startLocker(t, "A1", a.path("b"))
	a1.want("open", "ok")
	a1.want("lock w 0 10", "ok")
	wantDelegations(t, a, 1, 0)
	a1.want("unlock 0 10", "ok")
	a1.want("lock w 20 10", "ok")
	a1.want("test w 0 100", "none") // its own
	wantDelegations(t, a, 1, 0)
	b1 := startLocker(t, "B1", b.path("b"))
	b1.want("open", "ok")
	wantDelegations(t, a, 1, 1)
	b1.want("lock w 25 1", "eagain")
	b1.want("test r 0 100", "w 20 10")
	b1.want("lock w 0 10", "ok") // A unlocked it while delegated
	// A's locks go to the server now.
	a1.want("lock w 5 1", "eagain")
	a1.want("unlock 0 0", "ok")
	b1.want("lock w 25 1", "ok")

	// A local process: its open waits for the recall; its F_SETLK (and
	// F_OFD_SETLK) meet A's locks.
	a2 := startLocker(t, "A2", a.path("local"))
	a2.want("open", "ok")
	a2.want("lock w 0 10", "ok")
	a2.want("unlock 0 5", "ok")
	a2.want("lock r 100 1", "ok")
	a2.want("write hello", "ok") // cached by A, not yet written back
	wantDelegations(t, a, 2, 1)
	l := startLocker(t, "L", e.path("local"))
	l.want("open", "ok")
	wantDelegations(t, a, 2, 2)
	// The open waited for A's write-back too (section 14.1: the gate stands
	// in for the lease while it holds the file).
	l.want("read 5", "hello")
	l.want("lock w 5 1", "eagain")
	l.want("lock w 100 1", "eagain")
	l.want("lock r 100 1", "ok")
	l.want("lock w 0 5", "ok")
	l.want("test w 5 10", "w 5 5")
	if _, err := localLock(t, e.path("local"), unix.F_WRLCK, 9, 1); err == nil {
		t.Fatal("F_OFD_SETLK under A's recalled lock succeeded")
	}
	l.want("close", "ok")

	// NLM: every request recalls; TEST shows what A holds.
	a3 := startLocker(t, "A3", a.path("nlm"))
	a3.want("open", "ok")
	a3.want("lock w 0 10", "ok")
	a3.want("unlock 0 10", "ok")
	a3.want("lock r 3 1", "ok")
	wantDelegations(t, a, 3, 2)
	n := newNLMClient(t, e, "host-n")
	fh := e.lookup(e.root, "nlm")
	tr := n.test(n.lk(fh, 1, 0, 10), true)
	wantDelegations(t, a, 3, 3)
	if tr.Stat != nlm4.Denied || tr.Holder.Exclusive || tr.Holder.Offset != 3 || tr.Holder.Len != 1 {
		t.Fatalf("NLM TEST after the recall: %+v, want A's read lock [3,4)", tr)
	}
	wantNLM(t, "NLM write [0,3)", n.lock(n.lk(fh, 1, 0, 3), true, false, false), nlm4.Granted)
	// A blocked NLM request is granted when A unlocks.
	wantNLM(t, "NLM write [3,4), blocking", n.lock(n.lk(fh, 1, 3, 1), true, true, false), nlm4.Blocked)
	a3.want("unlock 0 0", "ok")
	h.waitGranted("the NLM waiter after A's unlock")

	// A local process that opened the file before A's lock keeps the
	// delegation from being granted (it could lock without a new open).
	writeLocal(t, e.path("pre"), nil, 0o666, a.path("pre"))
	p := startLocker(t, "P", e.path("pre"))
	p.want("open", "ok")
	a4 := startLocker(t, "A4", a.path("pre"))
	a4.want("open", "ok")
	g, r := delegations(a)
	a4.want("lock w 0 10", "ok")
	wantDelegations(t, a, g, r)
	p.want("lock w 5 1", "eagain")
	a4.want("unlock 0 10", "ok")
	p.want("lock w 5 1", "ok")
}

// TestMountSNFSLockDelegationWait: a blocked F_SETLKW is granted when the
// holder unlocks, whether it waits in the delegated mount (another process
// of A) or on the server (B's, after the recall its open made).
func TestMountSNFSLockDelegationWait(t *testing.T) {
	t.Parallel()
	e, _ := newDelegEnv(t)
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	os.WriteFile(e.path("db"), nil, 0o666)

	a1, a2 := startLocker(t, "A1", a.path("db")), startLocker(t, "A2", a.path("db"))
	a1.want("open", "ok")
	a2.want("open", "ok")
	a1.want("lock w 0 0", "ok")
	wantDelegations(t, a, 1, 0)
	a2.send("wait w 0 1") // waits in A's own lock manager
	select {
	case s := <-a2.out:
		t.Fatalf("A2's F_SETLKW answered %q while A1 holds the lock", s)
	case <-time.After(200 * time.Millisecond):
	}
	a1.want("unlock 0 0", "ok")
	if s := a2.answer(); s != "ok" {
		t.Fatalf("A2's F_SETLKW: %q", s)
	}
	wantDelegations(t, a, 1, 0)

	// B's open recalls (A2's lock goes to the server); B waits there.
	b1 := startLocker(t, "B1", b.path("db"))
	b1.want("open", "ok")
	wantDelegations(t, a, 1, 1)
	b1.send("wait w 0 0")
	waitWaiters(t, e, 1)
	a2.want("unlock 0 1", "ok")
	if s := b1.answer(); s != "ok" {
		t.Fatalf("B1's F_SETLKW: %q", s)
	}
	a1.want("lock r 5 1", "eagain")

	// A waiter in the delegated mount when the recall comes goes to the
	// server and is granted there.
	writeLocal(t, e.path("db2"), nil, 0o666, a.path("db2"))
	c1, c2 := startLocker(t, "C1", a.path("db2")), startLocker(t, "C2", a.path("db2"))
	c1.want("open", "ok")
	c2.want("open", "ok")
	c1.want("lock w 0 10", "ok")
	g, r := delegations(a)
	c2.send("wait w 5 1")
	time.Sleep(100 * time.Millisecond)
	l := startLocker(t, "L", e.path("db2"))
	l.want("open", "ok")
	wantDelegations(t, a, g, r+1)
	l.want("lock r 9 1", "eagain")
	waitWaiters(t, e, 1)
	c1.want("unlock 0 0", "ok")
	if s := c2.answer(); s != "ok" {
		t.Fatalf("C2's F_SETLKW after the recall: %q", s)
	}
	l.want("lock r 5 1", "eagain")
	l.want("lock r 6 1", "ok")

	// A process holding a delegated lock is killed: its locks go (FLUSH with
	// its lock owner, served in the mount).
	writeLocal(t, e.path("db3"), nil, 0o666, a.path("db3"))
	k, k2 := startLocker(t, "K", a.path("db3")), startLocker(t, "K2", a.path("db3"))
	k.want("open", "ok")
	k2.want("open", "ok")
	g, r = delegations(a)
	k.want("lock w 0 0", "ok")
	wantDelegations(t, a, g+1, r)
	k2.want("lock w 0 1", "eagain")
	k.cmd.Process.Signal(syscall.SIGKILL)
	k.cmd.Wait()
	for try := 0; ; try++ {
		ans := k2.do("lock w 0 1")
		if ans == "ok" {
			break
		}
		if try == 500 {
			t.Fatalf("K2 after K was killed: %q", ans)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantDelegations(t, a, g+1, r)
}

// TestMountSNFSLockDelegationModel: a seeded random sequence of locks,
// unlocks, opens and closes by two processes of mount A, one of mount B, a
// local process and an NLM client, each answer checked against a model of
// exclusive and shared byte ranges. Delegations come and go as B and the
// local process open and close the file.
func TestMountSNFSLockDelegationModel(t *testing.T) {
	t.Parallel()
	e, _ := newDelegEnv(t)
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	os.WriteFile(e.path("db"), nil, 0o666)
	n := newNLMClient(t, e, "host-n")
	fh := e.lookup(e.root, "db")

	const size = delegSize
	type actor = delegActor
	actors := []*actor{
		{name: "A1", path: a.path("db")}, {name: "A2", path: a.path("db")},
		{name: "B1", path: b.path("db")}, {name: "L", path: e.path("db")}, {name: "N"},
	}
	for _, x := range actors {
		if x.path != "" {
			x.l = startLocker(t, x.name, x.path)
		}
	}
	// A's processes keep the file open; B and the local process come and go.
	for _, x := range actors[:2] {
		x.l.want("open", "ok")
		x.open = true
	}
	seed := uint64(1)
	if s := os.Getenv("SNFS_DELEG_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (SNFS_DELEG_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	conflict := func(x *actor, w bool, s, ln int) bool {
		for _, y := range actors {
			if y == x {
				continue
			}
			for i := s; i < s+ln; i++ {
				if y.held[i] == 'w' || (w && y.held[i] == 'r') {
					return true
				}
			}
		}
		return false
	}
	for step := range 600 {
		x := actors[rng.IntN(len(actors))]
		s := rng.IntN(size - 1)
		ln := 1 + rng.IntN(min(6, size-s))
		w := rng.IntN(2) == 0
		k := "r"
		if w {
			k = "w"
		}
		what := fmt.Sprintf("step %d (seed %d): %s", step, seed, x.name)
		if step%40 == 39 {
			// Everyone lets go, and B and the local process close the file:
			// A's next lock may be delegated again.
			for _, y := range actors {
				switch {
				case y.l == nil:
					wantNLM(t, what+" unlock all", n.unlock(n.lk(fh, 1, 0, 0)), nlm4.Granted)
				case y.name == "B1" || y.name == "L":
					if y.open {
						y.l.want("close", "ok")
						y.open = false
					}
				default:
					y.l.want("unlock 0 0", "ok")
				}
				y.held = [size]byte{}
			}
			continue
		}
		if x.l != nil && (x.name == "B1" || x.name == "L") && (!x.open || rng.IntN(8) == 0) {
			if x.open {
				x.l.want("close", "ok")
				x.held = [size]byte{}
			} else {
				x.l.want("open", "ok")
			}
			x.open = !x.open
			continue
		}
		switch op := rng.IntN(3); {
		case op < 2: // lock
			want := !conflict(x, w, s, ln)
			var got bool
			if x.l != nil {
				ans := x.l.do(fmt.Sprintf("lock %s %d %d", k, s, ln))
				if ans != "ok" && ans != "eagain" {
					t.Fatalf("%s lock %s [%d,%d): %s", what, k, s, s+ln, ans)
				}
				got = ans == "ok"
			} else {
				st := n.lock(n.lk(fh, 1, uint64(s), uint64(ln)), w, false, false)
				if st != nlm4.Granted && st != nlm4.Denied {
					t.Fatalf("%s lock: %v", what, st)
				}
				got = st == nlm4.Granted
			}
			if got != want {
				t.Fatalf("%s lock %s [%d,%d): granted %v, the model says %v (holders: %s)", what, k, s, s+ln, got, want, heldString(actors))
			}
			if got {
				for i := s; i < s+ln; i++ {
					x.held[i] = k[0]
				}
			}
		default: // unlock
			if x.l != nil {
				x.l.want(fmt.Sprintf("unlock %d %d", s, ln), "ok")
			} else {
				wantNLM(t, what+" unlock", n.unlock(n.lk(fh, 1, uint64(s), uint64(ln))), nlm4.Granted)
			}
			for i := s; i < s+ln; i++ {
				x.held[i] = 0
			}
		}
	}
	g, r := delegations(a)
	t.Logf("A: %d delegations, %d recalled in the sequence", g, r)
	// Then once for certain: everyone lets go and B and the local process
	// close; A's lock is delegated once B's close has reached the server (a
	// bounded wait), and B's open recalls it.
	wantNLM(t, "final unlock", n.unlock(n.lk(fh, 1, 0, 0)), nlm4.Granted)
	for _, y := range actors[:4] {
		if y.name == "B1" || y.name == "L" {
			if y.open {
				y.l.want("close", "ok")
			}
			continue
		}
		y.l.want("unlock 0 0", "ok")
	}
	a1, b1 := actors[0].l, actors[2].l
	for try := 0; ; try++ {
		a1.want("lock w 0 1", "ok")
		if g2, _ := delegations(a); g2 > g {
			break
		}
		a1.want("unlock 0 1", "ok")
		if try == 500 {
			t.Fatal("A's lock was never delegated with B and the local process gone")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b1.want("open", "ok")
	b1.want("lock r 0 1", "eagain")
	if _, r2 := delegations(a); r2 <= r {
		t.Fatalf("B's open did not recall A's delegation (%d recalls, %d before)", r2, r)
	}
}

const delegSize = 16

// delegActor is one lock user of TestMountSNFSLockDelegationModel.
type delegActor struct {
	name string
	l    *locker // nil: the NLM client
	path string
	open bool
	held [delegSize]byte // 0, 'r', 'w'
}

func heldString(actors []*delegActor) string {
	var b strings.Builder
	for _, x := range actors {
		fmt.Fprintf(&b, "%s(open %v) ", x.name, x.open)
		for _, c := range x.held {
			if c == 0 {
				c = '.'
			}
			b.WriteByte(c)
		}
		b.WriteString("; ")
	}
	return b.String()
}
