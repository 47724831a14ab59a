package vfs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"syscall"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/nlm4"
	"snfs/snfs1"
)

// Byte-range locks in nfs mode (docs/mount.md, "Locks in nfs mode"): FUSE's
// GETLK, SETLK and SETLKW (and flock, the kernel's whole-file lock of its open
// file description) become NLM v4 TEST, LOCK and UNLOCK calls to the server's
// lock manager, as the Linux NFS client's lockd makes them. A blocked LOCK
// (NLM4_BLOCKED) waits here for the server's GRANTED (or GRANTED_MSG) call to
// this mount's callback service (nlmcb.go), and sends the same LOCK again
// every NLMConfig.Poll meanwhile, so that a server that cannot call back
// grants too; an interrupted one is withdrawn with CANCEL. A lock request
// writes the file's dirty data back first and a grant drops the attributes and
// pages cached of the file (close-to-open style), as in snfs mode.
//
// The lock owner on the wire: oh is the kernel's 8-byte FUSE lock owner
// followed by this mount's 8-byte instance number (random at start), so that
// two mounts never share an owner even with one caller_name; svid is a 31-bit
// hash of oh (servers such as Linux's lockd key owners by (host, svid)).

// NLMConfig turns on server locks in nfs mode (Config.NLM).
type NLMConfig struct {
	// Addr is the server's NLM v4 over TCP (client.FindNLM asks its
	// rpcbind); "": the server has none, and every lock request fails with
	// ErrNoLocks (ENOLCK, as on a Linux NFS mount whose server runs no lockd).
	Addr string
	// CallerName is the name of this mount in the calls (caller_name):
	// `snfs mount` uses HOST:MOUNTPOINT, unique per mount on a host and the
	// same across its restarts (docs/mount.md, "Locks in nfs mode"); the
	// mount sends FREE_ALL for it at start. "" is the host name.
	CallerName string
	// CallbackAddr is where the GRANTED callback service listens (TCP and UDP
	// on one port); "": every address, any port.
	CallbackAddr string
	// RPCBind is the local rpcbind's address at which the callback service
	// is registered (SET of NLM v4, TCP and UDP), for the server to find it;
	// "": not registered (blocked locks are then granted by polling only).
	RPCBind string
	// Poll is how often a blocked LOCK is sent again; 0: 5 s.
	Poll time.Duration
	// NSMAddr is the server's status monitor (NSM v1 over TCP), whose
	// SM_STAT state number tells the mount that the server restarted, so
	// that it reclaims its locks (nlmreclaim.go); "": locks are not
	// reclaimed.
	NSMAddr string
	// PeerDir is where this host's mounts list their callback services by
	// caller_name, so that the one rpcbind lists passes other mounts'
	// GRANTED calls on (nlmcb.go); "": none.
	PeerDir string
}

// nlmFS is an nfs mode FS's NLM state.
type nlmFS struct {
	cfg      NLMConfig
	c        *client.NLM
	instance [8]byte
	locks    LockTable    // the waiting requests and the owners with locks
	cb       *nlmCallback // nlmcb.go
	watch    *nlmWatch    // the server's restarts (nlmreclaim.go)
	// life ends at Close: the context of CANCELs and of GRANTED_RES calls.
	life      context.Context
	endLife   context.CancelFunc
	closeOnce sync.Once
}

// startNLM connects to the server's lock manager and starts the callback
// service.
func (fs *FS) startNLM(ctx context.Context, cfg NLMConfig) error {
	if cfg.Poll == 0 {
		cfg.Poll = 5 * time.Second
	}
	if cfg.CallerName == "" {
		name, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("vfs: the caller_name of NLM calls: %w", err)
		}
		cfg.CallerName = name
	}
	nl := &nlmFS{cfg: cfg}
	if cfg.Addr == "" {
		fs.nl, fs.LockTab = nl, &nl.locks
		return nil
	}
	c, err := client.DialNLM(ctx, cfg.Addr, cfg.CallerName)
	if err != nil {
		return err
	}
	nl.c = c
	// A previous instance of this mount (same caller_name) that died left
	// its locks on the server: they go now, as a rebooted host's do when its
	// status monitor sends SM_NOTIFY.
	if err := c.FreeAll(ctx, 0); err != nil {
		fs.log.Warn("NLM: FREE_ALL of a previous instance's locks", "caller_name", cfg.CallerName, "err", err)
	}
	rand.Read(nl.instance[:])
	nl.life, nl.endLife = context.WithCancel(context.Background())
	fs.nl, fs.LockTab = nl, &nl.locks
	if nl.cb, err = fs.startNLMCallback(ctx); err != nil {
		nl.endLife()
		c.Close()
		fs.nl, fs.LockTab = nil, nil
		return err
	}
	fs.startNLMWatch(ctx)
	return nil
}

// closeNLM unregisters and stops the callback service and closes the
// connection. The locks still held (none after a clean unmount: every file
// was closed) stay with the server until this host's status monitor tells it
// of a restart.
func (fs *FS) closeNLM() {
	if fs.nl.c == nil {
		return
	}
	fs.nl.endLife()
	fs.stopNLMWatch()
	fs.nl.cb.stop()
	fs.nl.c.Close()
}

// NLMCallbackPort is the port of the GRANTED callback service (0 in snfs mode
// or without server locks).
func (fs *FS) NLMCallbackPort() int {
	if fs.nl == nil || fs.nl.cb == nil {
		return 0
	}
	return fs.nl.cb.port
}

// ServerLocks reports whether locks go to the server (snfs mode, or nfs mode
// with NLM).
func (fs *FS) ServerLocks() bool { return fs.ops.LocksAtServer() }

// oh is the NLM owner handle of the kernel's lock owner.
func (nl *nlmFS) oh(owner uint64) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), owner)
	return append(b, nl.instance[:]...)
}

// ownerOf is the kernel's lock owner of an owner handle of this mount's.
func (nl *nlmFS) ownerOf(oh []byte) (uint64, bool) {
	if len(oh) != 16 || string(oh[8:]) != string(nl.instance[:]) {
		return 0, false
	}
	return binary.BigEndian.Uint64(oh), true
}

func svidOf(oh []byte) int32 {
	h := fnv.New32a()
	h.Write(oh)
	return int32(h.Sum32() & 0x7fffffff)
}

func (nl *nlmFS) lock(i *Inode, owner uint64, off, n uint64) nlm4.Lock {
	oh := nl.oh(owner)
	return nlm4.Lock{FH: i.FH, OH: oh, Svid: svidOf(oh), Offset: off, Len: n}
}

// errNoNLM: nfs mode with server locks against a server without NLM.
var errNoNLM = fmt.Errorf("vfs: the server runs no NLM (--locks=local keeps locks on this machine): %w", ErrNoLocks)

// nlmErr is the error of an NLM status that refuses a request for another
// reason than a conflict.
func nlmErr(proc string, st nlm4.Stat) error {
	switch st {
	case nlm4.StaleFH:
		return fmt.Errorf("vfs: NLM %s: %w", proc, nfs3.ErrStale)
	case nlm4.ROFS:
		return fmt.Errorf("vfs: NLM %s: %w", proc, syscall.EROFS)
	case nlm4.FBig:
		return fmt.Errorf("vfs: NLM %s: %w", proc, syscall.EOVERFLOW)
	}
	return fmt.Errorf("vfs: NLM %s: %v: %w", proc, st, ErrNoLocks)
}

// nlmGraceRetry sends a TEST or LOCK again while the server answers
// NLM4_DENIED_GRACE_PERIOD, until ctx ends (graceRetry's rule). That answer,
// or a failed call, may mean the server restarted: the watch looks at once
// (nlmreclaim.go).
func (nl *nlmFS) nlmGraceRetry(ctx context.Context, call func() (nlm4.Stat, error)) (nlm4.Stat, error) {
	var st nlm4.Stat
	err := GraceRetry(ctx, func() (snfs1.LockStat, error) {
		var err error
		st, err = call()
		if err != nil || st == nlm4.DeniedGracePeriod {
			nl.watch.kickNow()
		}
		if err == nil && st == nlm4.DeniedGracePeriod {
			return snfs1.LockGrace, nil
		}
		return snfs1.LockGranted, err
	})
	return st, err
}

// rlock holds off a reclaim (nlmreclaim.go) while a lock request's call and
// its bookkeeping run.
func (nl *nlmFS) rlock() func() {
	if nl.watch == nil {
		return func() {}
	}
	nl.watch.mu.RLock()
	return nl.watch.mu.RUnlock
}

func (fs *FS) nlmGetlk(ctx context.Context, i *Inode, owner uint64, kind LockKind, off, n uint64) (*LockHolder, error) {
	nl := fs.nl
	if nl.c == nil {
		return nil, errNoNLM
	}
	var res *nlm4.TestRes
	_, err := nl.nlmGraceRetry(ctx, func() (nlm4.Stat, error) {
		var err error
		if res, err = nl.c.Test(ctx, nl.lock(i, owner, off, n), kind == WriteLock); err != nil {
			return 0, err
		}
		return res.Stat, nil
	})
	if err != nil {
		return nil, err
	}
	switch res.Stat {
	case nlm4.Granted:
		return nil, nil
	case nlm4.Denied:
		k := ReadLock
		if res.Holder.Exclusive {
			k = WriteLock
		}
		return &LockHolder{Kind: k, Offset: res.Holder.Offset, Length: res.Holder.Len}, nil
	}
	return nil, nlmErr("TEST", res.Stat)
}

func (fs *FS) nlmSetlk(ctx context.Context, f *File, owner uint64, kind LockKind, off, n uint64, wait bool) error {
	nl, i := fs.nl, f.I
	if nl.c == nil {
		return errNoNLM
	}
	if err := fs.Fsync(ctx, f); err != nil {
		return err
	}
	l := nl.lock(i, owner, off, n)
	if kind == Unlock {
		unlock := nl.rlock()
		defer unlock()
		st, err := nl.c.Unlock(ctx, l)
		if err != nil {
			nl.watch.kickNow()
			return err
		}
		if st != nlm4.Granted {
			return nlmErr("UNLOCK", st)
		}
		nl.locks.NoteRange(i, owner, off, n, false, true)
		if off == 0 && n == 0 {
			nl.locks.ForgetOwner(i, owner)
			fs.DropHeld(i, nil, owner)
		}
		return nil
	}
	excl := kind == WriteLock
	nl.locks.NoteOwner(i, owner)
	var w *LockWait
	key := WaitKey{string(i.FH), owner, ProtoLockType(kind), off, n}
	if wait {
		// Before the LOCK: its GRANTED may come before its reply.
		w = nl.locks.AddWait(key)
		defer nl.locks.DropWait(key, w)
	}
	for {
		st, err := nl.nlmGraceRetry(ctx, func() (nlm4.Stat, error) {
			unlock := nl.rlock()
			defer unlock()
			st, err := nl.c.Lock(ctx, l, excl, wait, 0)
			if err == nil && st == nlm4.Granted {
				fs.nlmHeld(f, owner, kind, off, n) // with the answer: before a reclaim looks
			}
			return st, err
		})
		fs.log.Debug("NLM LOCK", "fileid", i.FileID, "owner", owner, "exclusive", excl, "offset", off, "len", n, "block", wait, "stat", st, "err", err)
		if err != nil {
			if errors.Is(err, syscall.EINTR) || ctx.Err() != nil {
				if wait {
					// Interrupted before the answer: the server may have
					// queued the request already (its BLOCKED reply in
					// flight), and it would wait there until granted.
					nl.cancelWait(i, l, excl)
				}
				return syscall.EINTR
			}
			return err
		}
		switch st {
		case nlm4.Granted:
			fs.LockGranted(i)
			return nil
		case nlm4.Denied:
			return syscall.EAGAIN
		case nlm4.Deadlock:
			return syscall.EDEADLK
		case nlm4.Blocked:
		default:
			return nlmErr("LOCK", st)
		}
		t := time.NewTimer(nl.cfg.Poll)
		select {
		case <-w.Granted:
			t.Stop()
			fs.nlmGrantedHeld(f, owner, kind, off, n)
			return nil
		case <-t.C:
			continue // the same LOCK again: granted now if the server could not call back
		case <-ctx.Done():
			t.Stop()
		}
		if !nl.locks.GiveUp(w) {
			fs.nlmGrantedHeld(f, owner, kind, off, n) // the grant came first: the lock is held
			return nil
		}
		nl.cancelWait(i, l, excl)
		return syscall.EINTR
	}
}

// cancelWait sends CANCEL for a blocking LOCK given up (its process
// interrupted or killed) before the FUSE request is answered, so that the
// server holds no waiter for it once the process is gone.
func (nl *nlmFS) cancelWait(i *Inode, l nlm4.Lock, excl bool) {
	ctx, cancel := context.WithTimeout(nl.life, 10*time.Second)
	defer cancel()
	if _, err := nl.c.Cancel(ctx, l, excl); err != nil {
		i.fs.log.Warn("cancelling a waiting lock", "fileid", i.FileID, "err", err)
	}
}

// nlmHeld records owner's lock of kind on (off, n) granted through f (for
// its reclaim, and its loss).
func (fs *FS) nlmHeld(f *File, owner uint64, kind LockKind, off, n uint64) {
	fs.NoteHeld(f, owner)
	fs.nl.locks.NoteRange(f.I, owner, off, n, kind == WriteLock, false)
}

// nlmGrantedHeld records a blocked lock granted by the server's GRANTED
// call, and drops what was cached of the file.
func (fs *FS) nlmGrantedHeld(f *File, owner uint64, kind LockKind, off, n uint64) {
	unlock := fs.nl.rlock()
	fs.nlmHeld(f, owner, kind, off, n)
	unlock()
	fs.LockGranted(f.I)
}

// nlmUnlockOwner releases owner's locks on i (FLUSH, RELEASE): an UNLOCK of
// the whole file, sent only if owner took a lock on i.
func (fs *FS) nlmUnlockOwner(ctx context.Context, i *Inode, owner uint64) error {
	nl := fs.nl
	fs.DropHeld(i, nil, owner)
	// Not reclaimed after a server restart even if the unlock below fails:
	// the owner has let its locks of the file go.
	nl.locks.DropRanges(i, owner)
	if nl.c == nil || !nl.locks.HasOwner(i, owner) {
		return nil
	}
	unlock := nl.rlock()
	defer unlock()
	st, err := nl.c.Unlock(ctx, nl.lock(i, owner, 0, 0))
	if err != nil {
		nl.watch.kickNow()
		return err
	}
	if st != nlm4.Granted && st != nlm4.StaleFH {
		return nlmErr("UNLOCK", st)
	}
	nl.locks.ForgetOwner(i, owner)
	return nil
}

// nlmGranted serves GRANTED and GRANTED_MSG (nlmcb.go): the oldest request
// of the lock that still waits takes it; Denied if none does (the server
// then takes the grant back).
func (fs *FS) nlmGranted(a *nlm4.TestArgs) nlm4.Stat {
	nl := fs.nl
	owner, ok := nl.ownerOf(a.Lock.OH)
	if a.Lock.CallerName != nl.c.CallerName {
		ok = false
	}
	if !ok {
		return nlm4.Denied
	}
	typ := snfs1.LockRead
	if a.Exclusive {
		typ = snfs1.LockWrite
	}
	l := &nl.locks
	l.Mu.Lock()
	defer l.Mu.Unlock()
	for _, w := range l.Waiting[WaitKey{string(a.Lock.FH), owner, typ, a.Lock.Offset, a.Lock.Len}] {
		if !w.Done {
			w.Done = true
			close(w.Granted)
			return nlm4.Granted
		}
	}
	return nlm4.Denied
}
