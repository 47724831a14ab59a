package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
)

// TestCrashCycles kills the server with SIGKILL SNFS_CRASH_CYCLES times (50
// by default), restarting it each time with the same state directory and
// ports, while two `snfs mount --mode=snfs` processes (separate cache
// directories; one writes back after an hour, so its dirty data lives
// through the crashes, the other after two seconds) and one plain NFSv3
// client (libnfs: nfs-cat for reads, the project's libnfs client for
// changes) run a mixed workload: whole-file writes that
// create, in-place writes with fsync, renames, unlinks and reads, each read
// usually right after another client's change.
//
// The workload runs one operation at a time (sequential sharing: a reader
// opens after the writer's close returned), so a model of the files built
// from the acknowledged operations (close or fsync returned; FILE_SYNC WRITE,
// RENAME or REMOVE answered) says exactly what every read must return. A read
// that returns an older acknowledged version is a stale read; any other
// difference (missing file, missing or wrong bytes) is a lost write. At the
// end both mounts are unmounted (writing everything back) and the export
// directory must equal the model.
//
// An operation that fails is retried until it succeeds (its result is then
// acknowledged); failures are errors the application saw, logged, not
// counted as loss.
func TestCrashCycles(t *testing.T) {
	t.Parallel()
	requireLong(t)
	requireFUSE(t)
	cycles := 50
	if v := os.Getenv("SNFS_CRASH_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SNFS_CRASH_CYCLES=%q", v)
		}
		cycles = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SNFS_CRASH_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (SNFS_CRASH_SEED replays the workload, not the kill times), %d cycles", seed, cycles)

	s := newServeProc(t, "--grace", "5s", "--log-level", "debug")
	m1 := newMountProc(t, s, s.nfsPort, time.Hour)
	m2 := newMountProc(t, s, s.nfsPort, 2*time.Second)
	pc := newPlainClient(t, s)
	w := &workload{t: t, rng: rand.New(rand.NewPCG(seed, 1)),
		clients: []wclient{mountClient{"mount1", m1}, mountClient{"mount2", m2}, pc},
		model:   map[string][]byte{}, history: map[string][][]byte{}, export: s.export}

	// The killer: SIGKILL at a random point of the workload, restart at once.
	var cycle atomic.Int64
	stopKiller := make(chan struct{})
	killerDone := make(chan struct{})
	killErr := make(chan error, 1)
	go func() {
		defer close(killerDone)
		r := rand.New(rand.NewPCG(seed, 2))
		for c := 1; c <= cycles; c++ {
			select {
			case <-stopKiller:
				return
			case <-time.After(time.Duration(1000+r.IntN(1500)) * time.Millisecond):
			}
			if err := s.kill9(); err != nil {
				killErr <- err
				return
			}
			cycle.Store(int64(c))
			if err := s.startErr(); err != nil {
				killErr <- err
				return
			}
			// The next kill comes after this instance's grace period
			// ended: kills faster than the grace period would keep the
			// server in grace for good (a client that makes no call does
			// not learn of the restart, so it does not reclaim, and the
			// grace period lasts until its bound).
			for end := time.Now().Add(30 * time.Second); s.metric("snfs_server_consist_grace_end_total") < 1 && time.Now().Before(end); {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	w.cycle = &cycle
	// On a wrong read: conflict copies in the export, and every warning
	// and error the mounts logged (their tails alone miss early cycles).
	w.diag = func() string {
		var b strings.Builder
		copies, _ := filepath.Glob(filepath.Join(s.export, "*.snfs-conflict-*"))
		fmt.Fprintf(&b, "conflict copies in the export: %v\n", copies)
		for _, m := range []*mntProc{m1, m2} {
			data, _ := os.ReadFile(m.logPath)
			for _, line := range strings.Split(string(data), "\n") {
				if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
					fmt.Fprintf(&b, "%s: %s\n", m.dir, line)
				}
			}
		}
		return b.String()
	}

	// At a hang: where the server and the mounts are (the test's own
	// goroutines show only the client side of the operation).
	w.hangDiag = func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "the server's goroutines:\n%s\n", s.goroutines())
		for _, m := range []*mntProc{m1, m2} {
			fmt.Fprintf(&b, "the goroutines of the mount on %s:\n%s\n", m.dir, m.quit())
		}
		return b.String()
	}

	// stop ends the killer; after a hang it also kills the mounts, whose
	// pending requests would otherwise keep this process's goroutines (and
	// the test binary) stuck in the kernel.
	stop := func(hung bool) {
		close(stopKiller)
		select {
		case <-killerDone:
		case <-time.After(time.Minute):
			t.Errorf("the killer did not stop within a minute (at cycle %d)", cycle.Load())
		}
		select {
		case err := <-killErr:
			t.Errorf("server restart at cycle %d: %v", cycle.Load(), err)
		default:
		}
		if hung {
			m1.kill9()
			m2.kill9()
		}
	}
	deadline := time.Now().Add(time.Duration(cycles)*4*time.Second + time.Minute)
	for {
		select {
		case <-killerDone:
		default:
			if time.Now().After(deadline) {
				stop(true)
				w.report()
				t.Fatalf("the workload did not finish %d cycles in time (at cycle %d after %d operations)", cycles, cycle.Load(), w.ops)
			}
			if !w.step() {
				stop(w.hung)
				w.report()
				t.FailNow()
			}
			continue
		}
		break
	}
	select {
	case err := <-killErr:
		t.Fatalf("restart after cycle %d: %v", cycle.Load(), err)
	default:
	}
	// A quiet round after the last restart.
	for i := 0; i < 20 && w.step(); i++ {
	}
	w.report()
	if w.hung {
		return
	}
	// Everything written back: the export is the model.
	for _, m := range []*mntProc{m1, m2} {
		if !m.stop() {
			t.Errorf("unmount of %s failed", m.dir)
		}
	}
	for _, name := range w.names() {
		want, ok := w.model[name]
		got, err := os.ReadFile(filepath.Join(s.export, name))
		switch {
		case ok && err != nil:
			t.Errorf("final: %s is missing from the export (%v); want %d bytes: lost", name, err, len(want))
		case !ok && err == nil:
			t.Errorf("final: %s exists in the export (%d bytes); it was removed or renamed away", name, len(got))
		case ok && !bytes.Equal(got, want):
			t.Errorf("final: %s", w.classify(name, got))
		}
	}
}

// wclient is one client of the workload. Each method returns when the
// operation was acknowledged, or with the error the application saw.
type wclient interface {
	name() string
	write(name string, data []byte, create bool) error // create, or truncate; write; close
	patch(name string, off int64, data []byte) error   // write in place, fsync, close
	read(name string) ([]byte, error)                  // fs.ErrNotExist if absent
	rename(from, to string) error                      // fs.ErrNotExist if from is absent
	remove(name string) error                          // fs.ErrNotExist if absent
}

type mountClient struct {
	id string
	m  *mntProc
}

func (c mountClient) name() string { return c.id }

func (c mountClient) write(name string, data []byte, create bool) error {
	flags := os.O_WRONLY | os.O_TRUNC
	if create {
		flags |= os.O_CREATE // not O_EXCL: a retry after a lost reply finds it
	}
	f, err := os.OpenFile(c.m.path(name), flags, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (c mountClient) patch(name string, off int64, data []byte) error {
	f, err := os.OpenFile(c.m.path(name), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, off); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (c mountClient) read(name string) ([]byte, error) { return os.ReadFile(c.m.path(name)) }
func (c mountClient) rename(from, to string) error {
	return os.Rename(c.m.path(from), c.m.path(to))
}
func (c mountClient) remove(name string) error { return os.Remove(c.m.path(name)) }

// plainClient is a plain NFSv3 client, libnfs's: a process per operation,
// nfs-cat for reads and the project's libnfs client (nfs-op,
// libnfs_tool_test.go) for changes, which fsyncs before its close. Where
// libnfs is not installed (outside CI) it is the project's Go NFS client, a
// connection per operation with FILE_SYNC writes.
type plainClient struct {
	s    *srvProc
	root nfs3.FH
	cat  string // nfs-cat, or "" for Go READs to EOF
	op   string // nfs-op, or "" for the Go client
}

func newPlainClient(t *testing.T, s *srvProc) *plainClient {
	t.Helper()
	c := &plainClient{s: s}
	// nfs-cat reads as far as GETATTR's size, so its reads also check that
	// a GETATTR waits for other clients' dirty blocks (docs/protocol.md
	// section 14). SNFS_CRASH_LIBNFS=0 uses the Go client instead.
	if os.Getenv("SNFS_CRASH_LIBNFS") != "0" {
		var err error
		if c.cat, err = exec.LookPath("nfs-cat"); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI is set and nfs-cat (libnfs-utils) is not installed (.ci/run must install it)")
			}
			t.Log("nfs-cat (libnfs-utils) is not installed: the plain client reads with the Go client")
		}
		var why string
		if c.op, why = libnfsOpTool(); c.op == "" {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI is set and %s", why)
			}
			t.Logf("%s: the plain client changes files with the Go client", why)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := client.DialMount(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", s.mountPort))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Mnt(ctx, s.export)
	if err != nil || res.Status != 0 {
		t.Fatalf("MNT: %v %v", err, res.Status)
	}
	c.root = res.FH
	return c
}

func (c *plainClient) name() string { return "plain" }

var errJukebox = errors.New("NFS3ERR_JUKEBOX")

// do runs f on a fresh connection.
func (c *plainClient) do(f func(ctx context.Context, n *client.NFS) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := client.DialNFS(ctx, "tcp", c.s.addr())
	if err != nil {
		return err
	}
	defer n.Close()
	return f(ctx, n)
}

func nfsErr(what string, st nfs3.Status, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case st == nfs3.ErrNoEnt:
		return fmt.Errorf("%s: %w", what, fs.ErrNotExist)
	case st == nfs3.ErrJukebox:
		return fmt.Errorf("%s: %w", what, errJukebox)
	case st != nfs3.OK:
		return fmt.Errorf("%s: %v", what, st)
	}
	return nil
}

func (c *plainClient) writeAt(ctx context.Context, n *client.NFS, fh nfs3.FH, off uint64, data []byte) error {
	for len(data) > 0 {
		w, err := n.Write(ctx, fh, off, data, nfs3.FileSync)
		if err != nil {
			return fmt.Errorf("WRITE: %w", err)
		}
		if err := nfsErr("WRITE", w.Status, nil); err != nil {
			return err
		}
		if w.Committed != nfs3.FileSync || w.Count == 0 {
			return fmt.Errorf("WRITE FILE_SYNC answered %v, count %d", w.Committed, w.Count)
		}
		data, off = data[w.Count:], off+uint64(w.Count)
	}
	return nil
}

// url is name's libnfs URL.
func (c *plainClient) url(name string) string {
	return fmt.Sprintf("nfs://127.0.0.1%s/%s?version=3&nfsport=%d&mountport=%d", c.s.export, name, c.s.nfsPort, c.s.mountPort)
}

// runOp runs nfs-op with args (and data on its standard input).
func (c *plainClient) runOp(data []byte, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := commandContext(ctx, c.op, args...)
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.CombinedOutput()
	var ee *exitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		return fmt.Errorf("nfs-op %s: %s: %w", args[0], bytes.TrimSpace(out), fs.ErrNotExist)
	}
	return fmt.Errorf("nfs-op %s: %v: %s", args[0], err, bytes.TrimSpace(out))
}

// write creates name (UNCHECKED, so that a retry finds it) or truncates it
// with SETATTR, as a Linux client's open(O_TRUNC) does, then writes.
func (c *plainClient) write(name string, data []byte, create bool) error {
	if c.op != "" {
		how := "trunc"
		if create {
			how = "create-trunc"
		}
		return c.runOp(data, "write", c.url(name), "0", how)
	}
	return c.do(func(ctx context.Context, n *client.NFS) error {
		var fh nfs3.FH
		if create {
			res, err := n.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: c.root, Name: name}, Mode: nfs3.Unchecked,
				Attr: nfs3.Sattr{Mode: u32p(0o644)}})
			if err != nil {
				return fmt.Errorf("CREATE: %w", err)
			}
			if err := nfsErr("CREATE", res.Status, nil); err != nil {
				return err
			}
			fh = res.Object
		} else {
			var err error
			if fh, err = c.lookup(ctx, n, name); err != nil {
				return err
			}
		}
		sa, err := n.Setattr(ctx, &nfs3.SetattrArgs{Object: fh, New: nfs3.Sattr{Size: u64p(0)}})
		if err != nil {
			return fmt.Errorf("SETATTR: %w", err)
		}
		if err := nfsErr("SETATTR size 0", sa.Status, nil); err != nil {
			return err
		}
		return c.writeAt(ctx, n, fh, 0, data)
	})
}

func (c *plainClient) lookup(ctx context.Context, n *client.NFS, name string) (nfs3.FH, error) {
	res, err := n.Lookup(ctx, c.root, name)
	if err != nil {
		return nil, fmt.Errorf("LOOKUP: %w", err)
	}
	if err := nfsErr("LOOKUP", res.Status, nil); err != nil {
		return nil, err
	}
	return res.Object, nil
}

func (c *plainClient) patch(name string, off int64, data []byte) error {
	if c.op != "" {
		return c.runOp(data, "write", c.url(name), fmt.Sprint(off), "keep")
	}
	return c.do(func(ctx context.Context, n *client.NFS) error {
		fh, err := c.lookup(ctx, n, name)
		if err != nil {
			return err
		}
		return c.writeAt(ctx, n, fh, uint64(off), data)
	})
}

func (c *plainClient) read(name string) ([]byte, error) {
	var out []byte
	err := c.do(func(ctx context.Context, n *client.NFS) error {
		fh, err := c.lookup(ctx, n, name)
		if err != nil {
			return err
		}
		if c.cat != "" {
			url := c.url(name)
			var stderr bytes.Buffer
			cmd := commandContext(ctx, c.cat, url)
			cmd.Stderr = &stderr
			b, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("nfs-cat: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
			}
			out = b
			return nil
		}
		for off := uint64(0); ; {
			rd, err := n.Read(ctx, fh, off, 1<<20)
			if err != nil {
				return fmt.Errorf("READ: %w", err)
			}
			if err := nfsErr("READ", rd.Status, nil); err != nil {
				return err
			}
			out = append(out, rd.Data...)
			off += uint64(len(rd.Data))
			if rd.EOF {
				return nil
			}
		}
	})
	return out, err
}

func (c *plainClient) rename(from, to string) error {
	if c.op != "" {
		return c.runOp(nil, "rename", c.url(from), "/"+to)
	}
	return c.do(func(ctx context.Context, n *client.NFS) error {
		res, err := n.Rename(ctx, c.root, from, c.root, to)
		if err != nil {
			return fmt.Errorf("RENAME: %w", err)
		}
		return nfsErr("RENAME", res.Status, nil)
	})
}

func (c *plainClient) remove(name string) error {
	if c.op != "" {
		return c.runOp(nil, "unlink", c.url(name))
	}
	return c.do(func(ctx context.Context, n *client.NFS) error {
		res, err := n.Remove(ctx, c.root, name)
		if err != nil {
			return fmt.Errorf("REMOVE: %w", err)
		}
		return nfsErr("REMOVE", res.Status, nil)
	})
}

// workload is the sequence of operations and the model of the files.
type workload struct {
	t       *testing.T
	rng     *rand.Rand
	clients []wclient
	cycle   *atomic.Int64
	ops     int
	next    int // the last name number used

	diag     func() string // what to show besides the operations when a read was wrong
	hangDiag func() string // what to show when an operation hangs (it may end the mounts)

	mu         sync.Mutex
	model      map[string][]byte   // acknowledged content of each existing file
	history    map[string][][]byte // every acknowledged content a name had, oldest first
	appErrs    int                 // errors the application saw (operation retried)
	lost       []string            // reads that lacked acknowledged bytes
	stale      []string            // reads that returned an older acknowledged version
	hung       bool                // an operation hung or kept failing: the mounts are suspect
	staleNames int                 // lookups of a removed or renamed-away name that still resolved
	log        []string            // the last operations, for the report
	all        []string            // every operation, for the history of a name read wrong
	badNames   []string            // the names read wrong
	export     string              // the export directory (for the fileids of names in the log)
}

// note records an operation in the log kept for the report.
func (w *workload) note(format string, args ...any) {
	l := fmt.Sprintf("%s cycle %d op %d: ", time.Now().Format("15:04:05.000"), w.cycle.Load(), w.ops) + fmt.Sprintf(format, args...)
	w.log = append(w.log, l)
	w.all = append(w.all, l)
	if len(w.log) > 60 {
		w.log = w.log[1:]
	}
}

// names lists every name the workload used.
func (w *workload) names() []string {
	n := make([]string, 0, len(w.history))
	for k := range w.history {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// step runs one operation (and its read-after-write check); false to stop
// (a hang, or too many findings).
//
// Names are never reused: a file is created under a fresh name and renamed
// to a fresh name. Names are outside the consistency protocol (docs/mount.md:
// a mount caches them like an NFS client, up to a minute), so a name that
// another client removed or renamed away may still resolve on a mount for a
// while; with fresh names such a stale name can only lead to the right file's
// data, and is counted apart (staleNames), not as a stale read.
func (w *workload) step() bool {
	w.ops++
	c := w.clients[w.rng.IntN(len(w.clients))]
	other := w.clients[w.rng.IntN(len(w.clients))]
	live := w.live()
	op := w.rng.IntN(12)
	switch {
	case len(live) < 3 || op < 3 && len(live) < 12: // create
		w.next++
		name := fmt.Sprintf("n%d", w.next)
		data := randBytes(w.rng.Uint64(), 1+w.rng.IntN(96<<10))
		if !w.retry(c, "create "+name, func() error { return c.write(name, data, true) }) {
			return false
		}
		w.set(name, data)
		return w.check(other, name, "read after "+c.name()+"'s create")
	case op < 6: // whole-file rewrite
		name := live[w.rng.IntN(len(live))]
		data := randBytes(w.rng.Uint64(), w.rng.IntN(96<<10))
		if !w.retry(c, "rewrite "+name, func() error { return c.write(name, data, false) }) {
			return false
		}
		w.set(name, data)
		return w.check(other, name, "read after "+c.name()+"'s rewrite")
	case op < 8: // in-place write + fsync
		name := live[w.rng.IntN(len(live))]
		old := w.model[name]
		off := int64(w.rng.IntN(len(old) + 1))
		data := randBytes(w.rng.Uint64(), 1+w.rng.IntN(16<<10))
		if !w.retry(c, fmt.Sprintf("patch %s at %d", name, off), func() error { return c.patch(name, off, data) }) {
			return false
		}
		nb := append([]byte{}, old...)
		if end := int(off) + len(data); end > len(nb) {
			nb = append(nb, make([]byte, end-len(nb))...)
		}
		copy(nb[off:], data)
		w.set(name, nb)
		return w.check(other, name, "read after "+c.name()+"'s patch")
	case op < 9: // rename to a fresh name
		name := live[w.rng.IntN(len(live))]
		w.next++
		to := fmt.Sprintf("n%d", w.next)
		tried := false // an attempt failed: it may have been done, its reply lost
		ok := w.retry(c, "rename "+name+" "+to, func() error {
			err := c.rename(name, to)
			if errors.Is(err, fs.ErrNotExist) && tried {
				return nil
			}
			tried = tried || err != nil
			return err
		})
		if !ok {
			return false
		}
		w.set(to, w.model[name])
		w.del(name)
		return w.check(other, to, "read after "+c.name()+"'s rename") && w.check(other, name, "lookup after "+c.name()+"'s rename")
	case op < 10: // unlink
		name := live[w.rng.IntN(len(live))]
		tried := false
		ok := w.retry(c, "remove "+name, func() error {
			err := c.remove(name)
			if errors.Is(err, fs.ErrNotExist) && tried {
				return nil
			}
			tried = tried || err != nil
			return err
		})
		if !ok {
			return false
		}
		w.del(name)
		return w.check(other, name, "lookup after "+c.name()+"'s remove")
	default:
		return w.check(c, live[w.rng.IntN(len(live))], "read")
	}
}

// live lists the names that exist in the model, sorted.
func (w *workload) live() []string {
	n := make([]string, 0, len(w.model))
	for k := range w.model {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func (w *workload) set(name string, data []byte) {
	w.model[name] = data
	w.history[name] = append(w.history[name], data)
	ino := uint64(0)
	if fi, err := os.Stat(filepath.Join(w.export, name)); err == nil {
		ino = fi.Sys().(*syscall.Stat_t).Ino
	}
	w.note("model: %s = %d bytes (version %d, fileid %d)", name, len(data), len(w.history[name]), ino)
}

func (w *workload) del(name string) {
	delete(w.model, name)
	w.history[name] = append(w.history[name], nil)
	w.note("model: %s removed", name)
}

// opTimeout bounds one operation, retries included: the server is back
// within seconds of each kill.
const opTimeout = 90 * time.Second

// retry runs f until it succeeds; false if it never does within opTimeout
// (or hangs).
func (w *workload) retry(c wclient, what string, f func() error) bool {
	deadline := time.Now().Add(opTimeout)
	start := time.Now()
	defer func() { w.note("%s %s (%v)", c.name(), what, time.Since(start).Round(time.Millisecond)) }()
	for {
		done := make(chan error, 1)
		go func() { done <- f() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Until(deadline)):
			w.t.Errorf("cycle %d op %d: %s %s hangs (more than %v)", w.cycle.Load(), w.ops, c.name(), what, opTimeout)
			// Where it hangs: this process's goroutines (the operation's
			// own, in client, sunrpc or os/exec, among them).
			var stacks strings.Builder
			pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			w.t.Logf("goroutines at the hang:\n%s", stacks.String())
			if w.hangDiag != nil {
				w.t.Log(w.hangDiag())
			}
			w.hung = true
			return false
		}
		if err == nil {
			return true
		}
		w.appErrs++
		w.t.Logf("cycle %d op %d: %s %s: %v (retrying)", w.cycle.Load(), w.ops, c.name(), what, err)
		if time.Now().After(deadline) {
			w.t.Errorf("cycle %d op %d: %s %s failed for %v: %v", w.cycle.Load(), w.ops, c.name(), what, opTimeout, err)
			w.hung = true
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check reads name through c and compares with the model; false to stop.
func (w *workload) check(c wclient, name, what string) bool {
	var got []byte
	var rerr error
	if !w.retry(c, what+" "+name, func() error {
		got, rerr = c.read(name)
		if errors.Is(rerr, fs.ErrNotExist) {
			return nil
		}
		return rerr
	}) {
		return false
	}
	want, exists := w.model[name]
	where := fmt.Sprintf("cycle %d op %d: %s %s %s", w.cycle.Load(), w.ops, c.name(), what, name)
	switch {
	case exists && rerr != nil:
		w.badNames = append(w.badNames, name)
		w.lost = append(w.lost, fmt.Sprintf("%s: MISSING: the file does not exist; want %d bytes", where, len(want)))
	case !exists && rerr == nil:
		w.staleNames++ // documented: names are cached (see step)
		w.note("%s: the name still resolves (%d bytes)", where, len(got))
	case exists && !bytes.Equal(got, want):
		w.badNames = append(w.badNames, name)
		msg := where + ": " + w.classify(name, got)
		if w.isStale(name, got) {
			w.stale = append(w.stale, msg)
		} else {
			w.lost = append(w.lost, msg)
		}
	}
	return len(w.lost)+len(w.stale) < 20
}

func (w *workload) isStale(name string, got []byte) bool {
	h := w.history[name]
	for i := len(h) - 2; i >= 0; i-- {
		if h[i] != nil && bytes.Equal(h[i], got) {
			return true
		}
	}
	return false
}

// classify describes how got differs from the model of name.
func (w *workload) classify(name string, got []byte) string {
	want := w.model[name]
	h := w.history[name]
	for i := len(h) - 2; i >= 0; i-- {
		if h[i] != nil && bytes.Equal(h[i], got) {
			return fmt.Sprintf("STALE: reads version %d of %d (%d bytes), want the last acknowledged (%d bytes)", i+1, len(h), len(got), len(want))
		}
	}
	first := 0
	for first < len(got) && first < len(want) && got[first] == want[first] {
		first++
	}
	return fmt.Sprintf("MISSING BYTES: reads %d bytes, want %d; first difference at byte %d (no earlier acknowledged version matches)", len(got), len(want), first)
}

func (w *workload) report() {
	w.t.Logf("%d operations, %d errors seen by the application (retried), %d reads missing acknowledged bytes, %d stale reads; %d lookups of a removed name that still resolved (names are cached, documented)",
		w.ops, w.appErrs, len(w.lost), len(w.stale), w.staleNames)
	if len(w.lost)+len(w.stale) > 0 || w.hung {
		w.t.Logf("the last operations:\n%s", strings.Join(w.log, "\n"))
	}
	if len(w.lost)+len(w.stale) > 0 && w.diag != nil {
		w.t.Logf("diagnostics:\n%s", w.diag())
	}
	for _, name := range w.badNames {
		var h []string
		for _, l := range w.all {
			if strings.Contains(l, " "+name+" ") || strings.HasSuffix(l, " "+name) {
				h = append(h, l)
			}
		}
		w.t.Logf("every operation on %s:\n%s", name, strings.Join(h, "\n"))
	}
	for _, l := range w.lost {
		w.t.Errorf("read without acknowledged bytes: %s", l)
	}
	for _, s := range w.stale {
		w.t.Errorf("stale read: %s", s)
	}
}
