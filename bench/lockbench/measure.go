package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"snfs/bench/internal/stats"
	"snfs/internal/faultproxy"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"
	"snfs/mount/vfs"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// calls counts a mount's calls by procedure name (its session's
// sunrpc.Observer).
type calls struct {
	mu sync.Mutex
	n  map[string]int // guarded by mu
}

func (c *calls) ObserveCall(program string, vers uint32, proc string, d time.Duration) {
	c.mu.Lock()
	c.n[proc]++
	c.mu.Unlock()
}

func (c *calls) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.n))
	for k, v := range c.n {
		m[k] = v
	}
	return m
}

func (c *calls) count(proc string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[proc]
}

// counts is what the two mounts did so far: the calls each sent, by
// procedure ("A GETATTR"), and the server's callbacks each served ("B
// callbacks": CB_CALLBACK, e.g. the CB_WRITEBACK a pinned holder answers
// for another client's GETATTR, docs/protocol.md section 10.1), and the
// lock lease renewals each sent ("A lease renewals").
func counts(a, b *benchMount) map[string]int {
	m := map[string]int{}
	for _, x := range []struct {
		name string
		m    *benchMount
	}{{"A", a}, {"B", b}} {
		for k, v := range x.m.obs.snapshot() {
			if k == "LOCKT" {
				// The benchmark never tests for a lock (F_GETLK): every
				// LOCKT is the mount renewing its lock lease, on a timer
				// (cachemgr's renewLocks), not a call of an operation.
				k = "lease renewals"
			}
			m[x.name+" "+k] = v
		}
		m[x.name+" callbacks"] = int(cachemgr.StatsOf(x.m.v).Callbacks.Load())
	}
	return m
}

func countsSince(a, b *benchMount, before map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range counts(a, b) {
		if v > before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// benchMount is one snfs-mode mount served in this process.
type benchMount struct {
	dir  string
	v    *vfs.FS
	srv  *fuse.Server
	obs  *calls
	file *os.File
	solo *os.File // -delegation: a file only this mount has open
}

func mountSNFS(ctx context.Context, addr, export, name, dir, cacheDir string) (*benchMount, error) {
	for _, d := range []string{dir, cacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	obs := &calls{n: map[string]int{}}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := cachemgr.OpenSNFS(mctx, cachemgr.SNFSMountConfig{Addr: addr, Export: export, Name: name + ":" + dir,
		CacheDir: cacheDir, Observer: obs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	srv, err := fusefs.Mount(context.Background(), dir, v, fusefs.Options{FsName: "lockbench:" + export, Passthrough: true})
	if err != nil {
		v.Close()
		return nil, err
	}
	return &benchMount{dir: dir, v: v, srv: srv, obs: obs}, nil
}

func (m *benchMount) unmount() error {
	if m.file != nil {
		m.file.Close()
	}
	err := fusefs.Unmount(m.dir, m.srv, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return errors.Join(err, m.v.Sync(ctx), m.v.Close())
}

// phase is one phase's latencies and the mount's calls per operation.
type phase struct {
	lat   []time.Duration
	calls map[string]float64
}

func (p phase) median() time.Duration { return quantile(p.lat, 0.5) }

// rep is one repetition: the three phases.
type rep struct {
	getattr, lock phase
	grant         phase // lat: from A's F_UNLCK returning to B's F_SETLKW returning
	grantFromCall []time.Duration
}

type delayResult struct {
	delay time.Duration
	ops   int
	reps  []rep
}

// measureDelay mounts A and B through a proxy delaying d each way and runs
// cfg.reps repetitions.
func measureDelay(ctx context.Context, cfg config, serverAddr, export, tag string, d time.Duration, progress io.Writer) (res delayResult, err error) {
	px, err := faultproxy.New(ctx, serverAddr)
	if err != nil {
		return res, err
	}
	defer px.Close()
	px.Delay(faultproxy.ClientToServer, d)
	px.Delay(faultproxy.ServerToClient, d)
	var ms []*benchMount
	defer func() {
		for _, m := range ms {
			if uerr := m.unmount(); uerr != nil && err == nil {
				err = fmt.Errorf("unmount %s: %w", m.dir, uerr)
			}
		}
	}()
	for _, name := range []string{"A", "B"} {
		m, err := mountSNFS(ctx, px.Addr(), export, "lockbench-"+tag+name,
			filepath.Join(cfg.work, "mnt-"+tag+name), filepath.Join(cfg.work, "cache-"+tag+name))
		if err != nil {
			return res, fmt.Errorf("mount %s: %w", name, err)
		}
		ms = append(ms, m)
	}
	a, b := ms[0], ms[1]
	// Open read-write through both: write sharing, so neither caches the
	// file and each fstat through A is a GETATTR.
	order := ms
	if cfg.bFirst {
		order = []*benchMount{b, a}
	}
	for _, m := range order {
		if m.file, err = os.OpenFile(filepath.Join(m.dir, "locked-"+tag), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
			return res, err
		}
	}
	if _, err := a.file.WriteAt([]byte("lockbench"), 0); err != nil {
		return res, err
	}
	if cfg.deleg {
		if a.solo, err = os.OpenFile(filepath.Join(a.dir, "solo-"+tag), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
			return res, err
		}
		defer a.solo.Close()
	}
	n := cfg.ops
	if d > 0 {
		n = min(n, max(20, int(cfg.budget/(4*d))))
	}
	res = delayResult{delay: d, ops: n}
	// Warm-up: the first calls of each kind (inode cache, connections).
	if _, err := getattrPhase(a, b, 20); err != nil {
		return res, err
	}
	if _, err := lockPhase(a, b, 20); err != nil {
		return res, err
	}
	for r := 0; r < cfg.reps; r++ {
		var x rep
		first, second := getattrPhase, lockPhase
		px1, px2 := &x.getattr, &x.lock
		if r%2 == 1 {
			first, second = lockPhase, getattrPhase
			px1, px2 = &x.lock, &x.getattr
		}
		if *px1, err = first(a, b, n); err != nil {
			return res, err
		}
		if *px2, err = second(a, b, n); err != nil {
			return res, err
		}
		if x.grant, x.grantFromCall, err = grantPhase(a, b, cfg.trials); err != nil {
			return res, err
		}
		fmt.Fprintf(progress, "  rep %d: getattr %v, lock+unlock %v, grant after unlock %v (median)\n",
			r, x.getattr.median(), x.lock.median(), x.grant.median())
		res.reps = append(res.reps, x)
	}
	return res, nil
}

func perOp(m map[string]int, n int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = float64(v) / float64(n)
	}
	return out
}

// getattrPhase: n fstat calls through A on its open file.
func getattrPhase(m, b *benchMount, n int) (phase, error) {
	fd := int(m.file.Fd())
	before := counts(m, b)
	lat := make([]time.Duration, n)
	var st unix.Stat_t
	for i := range lat {
		t0 := time.Now()
		if err := unix.Fstat(fd, &st); err != nil {
			return phase{}, fmt.Errorf("fstat: %w", err)
		}
		lat[i] = time.Since(t0)
	}
	return phase{lat: lat, calls: perOp(countsSince(m, b, before), n)}, nil
}

func setlk(f *os.File, cmd int, typ int16) error {
	fl := unix.Flock_t{Type: typ, Whence: 0, Start: 0, Len: 1}
	return unix.FcntlFlock(f.Fd(), cmd, &fl)
}

// lockPhase: n uncontended write locks of the first byte through A, each
// unlocked.
func lockPhase(m, b *benchMount, n int) (phase, error) {
	before := counts(m, b)
	lat := make([]time.Duration, n)
	f := m.file
	if m.solo != nil {
		f = m.solo
	}
	for i := range lat {
		t0 := time.Now()
		if err := setlk(f, unix.F_SETLK, unix.F_WRLCK); err != nil {
			return phase{}, fmt.Errorf("F_SETLK: %w", err)
		}
		if err := setlk(f, unix.F_SETLK, unix.F_UNLCK); err != nil {
			return phase{}, fmt.Errorf("F_UNLCK: %w", err)
		}
		lat[i] = time.Since(t0)
	}
	return phase{lat: lat, calls: perOp(countsSince(m, b, before), n)}, nil
}

// grantPhase: trials times, A holds the lock, B's F_SETLKW waits on the
// server, A unlocks; the time from A's F_UNLCK returning (and from its
// start) to B's F_SETLKW returning.
func grantPhase(a, b *benchMount, trials int) (phase, []time.Duration, error) {
	before := counts(a, b)
	lat := make([]time.Duration, trials)
	fromCall := make([]time.Duration, trials)
	type got struct {
		at  time.Time
		err error
	}
	for i := range lat {
		if err := setlk(a.file, unix.F_SETLK, unix.F_WRLCK); err != nil {
			return phase{}, nil, fmt.Errorf("A's F_SETLK: %w", err)
		}
		locks := b.obs.count("LOCK")
		ch := make(chan got, 1)
		go func() {
			err := setlk(b.file, unix.F_SETLKW, unix.F_WRLCK)
			ch <- got{time.Now(), err}
		}()
		// B's LOCK has been answered (LOCK_BLOCKED): B waits for CB_GRANTED.
		deadline := time.Now().Add(30 * time.Second)
		for b.obs.count("LOCK") == locks {
			if time.Now().After(deadline) {
				return phase{}, nil, errors.New("B's LOCK was not answered within 30 s")
			}
			select {
			case g := <-ch:
				return phase{}, nil, fmt.Errorf("B's F_SETLKW returned (%v) while A holds the lock", g.err)
			case <-time.After(50 * time.Microsecond):
			}
		}
		t0 := time.Now()
		if err := setlk(a.file, unix.F_SETLK, unix.F_UNLCK); err != nil {
			return phase{}, nil, fmt.Errorf("A's F_UNLCK: %w", err)
		}
		t1 := time.Now()
		var g got
		select {
		case g = <-ch:
		case <-time.After(30 * time.Second):
			// B still waits: ending the run would leave its goroutine
			// in fcntl; the unmount at the end interrupts it.
			return phase{}, nil, errors.New("B's F_SETLKW not granted within 30 s of A's unlock")
		}
		if g.err != nil {
			return phase{}, nil, fmt.Errorf("B's F_SETLKW: %w", g.err)
		}
		lat[i], fromCall[i] = g.at.Sub(t1), g.at.Sub(t0)
		if err := setlk(b.file, unix.F_SETLK, unix.F_UNLCK); err != nil {
			return phase{}, nil, fmt.Errorf("B's F_UNLCK: %w", err)
		}
	}
	return phase{lat: lat, calls: perOp(countsSince(a, b, before), trials)}, fromCall, nil
}

// quantile is the q-quantile of v (nearest rank); 0 for none.
func quantile(v []time.Duration, q float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

func medianOf(xs []float64) float64 { return stats.Median(xs) }
