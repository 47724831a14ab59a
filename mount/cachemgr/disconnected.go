package cachemgr

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// Disconnected operation (docs/mount.md, "Disconnected operation"; issue 26
// item 4, Coda's): with --disconnected=auto, a mount whose server has
// answered nothing for DisconnectAfter goes offline. Offline, every call to
// the server fails at once with ErrDisconnected (the calls in flight are cut
// as it goes offline: the session's call gate), and the mount serves what it
// has cached: names of files it knows (the inode table: a file's last seen
// directory and name), their attributes as last seen, the data in the cache
// directory of files it holds open or keeps open (delayed close), writes to
// them into the cache (dirty, durable at close and fsync as always: nothing
// is acknowledged that is not on the local disk; an open for writing of one
// held or kept only for reading is granted locally, its OPEN owed until
// reconnection: offlinewrite.go). Namespace changes in
// directories whose listing the mount has (CREATE, MKDIR, REMOVE, RMDIR,
// RENAME) are made in those listings and logged in the modification log,
// the data of files made so kept in the cache directory (offline.go,
// offlinedata.go). What is not cached, and every other change, fails with
// ErrDisconnected. A probe (the SNFS NULL, which the gate lets through) goes
// on; when the server answers, the session has registered again (and
// reclaimed, if the server restarted), the mount goes online, reintegrates
// its log (offlinereint.go) and writes back
// its dirty files: a file another client (or a process on the server)
// changed meanwhile fails the base check before its write-back (checkBase)
// or was fenced, and is kept beside it as a conflict copy with the reason
// "disconnected".

// ErrDisconnected: the mount is offline (disconnected operation) and what
// was asked is not in its cache, or would change the server. Mapped to
// EHOSTDOWN by the FUSE bridge.
var ErrDisconnected = errors.New("snfs: server unreachable, the mount is disconnected and this is not in its cache")

// DefaultDisconnectAfter is how long the server answers nothing before an
// auto mount goes offline, unless configured.
const DefaultDisconnectAfter = 15 * time.Second

// offlineAttrTTL is how long the kernel keeps attributes served offline.
const offlineAttrTTL = time.Second

// discState is a mount's disconnected operation (nil: --disconnected=never).
type discState struct {
	after  time.Duration
	log    *slog.Logger
	lastOK atomic.Int64 // UnixNano of the latest call answered (a probe's included)
	off    atomic.Bool  // offline; read without mu on every operation
	forced atomic.Bool  // offline on request (SetDisconnected) until asked back

	mu      sync.Mutex
	since   time.Time          // offline since
	cut     context.Context    // cancelled as the mount goes offline
	endCut  context.CancelFunc // cancels cut
	written map[string]bool    // handles of files written while offline, until clean
	owed    []owedClose        // CLOSEs refused offline, sent on reconnection
	// owedOpens: files opened for writing offline with no OPEN
	// (offlinewrite.go), settled on reconnection.
	owedOpens map[*vfs.Inode]bool
	done      chan struct{} // closed when the loop returns
}

func newDisc(after time.Duration, log *slog.Logger) *discState {
	if after <= 0 {
		after = DefaultDisconnectAfter
	}
	d := &discState{after: after, log: log, written: map[string]bool{}, owedOpens: map[*vfs.Inode]bool{}, done: make(chan struct{})}
	d.cut, d.endCut = context.WithCancel(context.Background())
	d.lastOK.Store(time.Now().UnixNano())
	return d
}

// offline reports whether the mount is offline (false for never mounts).
func (d *discState) offline() bool { return d != nil && d.off.Load() }

// gate is the session's call gate (client.SessionConfig.CallGate): offline,
// NULL (the probe, the session's reconnection) goes and every other call
// fails at once; online, a call runs under a context cut when the mount goes
// offline, NULL included: a lookup in a cached listing whose lease needs
// renewing sends one with the FUSE request's context (no deadline), and
// across a partition it waited for the partition's end.
func (d *discState) gate(ctx context.Context, prog, vers, proc uint32) (context.Context, func(error) error, error) {
	d.mu.Lock()
	cut := d.cut
	d.mu.Unlock()
	if d.off.Load() {
		if proc == 0 {
			return ctx, d.answered, nil
		}
		d.log.Debug("disconnected: call not sent", "prog", prog, "proc", proc)
		return nil, nil, ErrDisconnected
	}
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(cut, cancel)
	return cctx, func(err error) error {
		stop()
		cancel()
		if err != nil && ctx.Err() == nil && cut.Err() != nil {
			return ErrDisconnected
		}
		return d.answered(err)
	}, nil
}

// answered records a call's end: answered if err is nil.
func (d *discState) answered(err error) error {
	if err == nil {
		d.lastOK.Store(time.Now().UnixNano())
	}
	return err
}

// noteWrite records that fh was written while offline (the reason of its
// conflict, if it comes to one).
func (d *discState) noteWrite(fh nfs3.FH) {
	if !d.offline() {
		return
	}
	d.mu.Lock()
	d.written[string(fh)] = true
	d.mu.Unlock()
}

// wroteOffline reports whether fh was written while offline and has not
// been written back since; clear forgets it.
func (d *discState) wroteOffline(fh nfs3.FH, clear bool) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.written[string(fh)]
	if clear {
		delete(d.written, string(fh))
	}
	return w
}

// owedClose is a CLOSE the machine sent (the application's last close, a
// kept open given back) while offline: the server still counts the open.
type owedClose struct {
	fh    nfs3.FH
	mode  state.Mode
	dirty bool
}

// owe records a CLOSE that failed with err: if offline (ErrDisconnected),
// it is sent again on reconnection and owe reports true.
func (d *discState) owe(fh nfs3.FH, mode state.Mode, dirty bool, err error) bool {
	if d == nil || !errors.Is(err, ErrDisconnected) {
		return false
	}
	d.mu.Lock()
	d.owed = append(d.owed, owedClose{fh: append(nfs3.FH(nil), fh...), mode: mode, dirty: dirty})
	d.mu.Unlock()
	d.log.Debug("disconnected: CLOSE owed until reconnection", "mode", mode, "dirty", dirty)
	return true
}

// dropOwed forgets the CLOSEs owed: the server restarted and knows only
// the opens this client reclaims (reclaimItems), not those.
func (d *discState) dropOwed() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.owed = nil
	d.mu.Unlock()
}

// sendOwed sends the CLOSEs owed (reconnected).
func (sn *snfsFS) sendOwed(ctx context.Context) {
	d := sn.disc
	d.mu.Lock()
	owed := d.owed
	d.owed = nil
	d.mu.Unlock()
	for _, o := range owed {
		if !o.dirty {
			sn.recordWrittenBack()
		}
		_, err := sn.sess.Close(ctx, o.fh, o.mode, o.dirty)
		if d.owe(o.fh, o.mode, o.dirty, err) {
			continue // offline again
		}
		if err != nil && !errors.Is(err, nfs3.ErrStale) && !errors.Is(err, snfs1.ErrFenced) {
			sn.Logger().Warn("CLOSE owed since the disconnection", "path", sn.PathOfFH(o.fh, nil), "err", err)
		}
	}
	if len(owed) > 0 {
		sn.Logger().Info("CLOSEs owed since the disconnection sent", "files", len(owed))
	}
}

// discLoop probes the server when no call was answered for a while, takes
// the mount offline after d.after without an answer and online at the
// first. Owned by the FS: it returns when stop closes (Close).
func (sn *snfsFS) discLoop() {
	d := sn.disc
	defer close(d.done)
	tick := min(max(d.after/5, 20*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	var syncs sync.WaitGroup // the write-backs after reconnections
	defer syncs.Wait()
	for {
		select {
		case <-sn.stop:
			return
		case <-t.C:
		}
		if d.forced.Load() {
			if !d.offline() {
				sn.goOffline(errors.New("on request"))
			}
			continue // no probe: offline until asked back
		}
		quiet := time.Since(time.Unix(0, d.lastOK.Load()))
		if !d.offline() && quiet < tick {
			continue // answered lately: no probe needed
		}
		ctx, cancel := context.WithTimeout(sn.life, max(2*tick, 200*time.Millisecond))
		err := sn.sess.Null(ctx)
		cancel()
		if sn.life.Err() != nil {
			return
		}
		sn.Logger().Debug("disconnected operation: probe", "quiet", quiet.Round(time.Millisecond), "offline", d.offline(), "err", err)
		switch {
		case err == nil && d.offline():
			sn.goOnline()
			syncs.Add(1)
			go func() {
				defer syncs.Done()
				sn.reconnected()
			}()
		case err != nil && !d.offline() && time.Since(time.Unix(0, d.lastOK.Load())) >= d.after:
			sn.goOffline(err)
		}
	}
}

// goOffline takes the mount offline: calls in flight are cut, new ones fail.
func (sn *snfsFS) goOffline(cause error) {
	d := sn.disc
	dirty := sn.dirtyInodes(time.Time{}) // before d.mu: markCleanIf takes it under sn.mu
	// What offline operations answer from is made first: the first one
	// (as soon as d.off is set) finds the listings' copies and the log's
	// directories.
	if sn.permits != nil {
		sn.permits.offWent() // offlineattr.go
	}
	sn.names.wentOffline() // the listings held become offline copies (disconnectednames.go)
	d.mu.Lock()
	d.since = time.Now()
	d.off.Store(true)
	d.endCut()
	quiet := d.since.Sub(time.Unix(0, d.lastOK.Load()))
	// Dirty already: their write-back waits for the server too.
	for _, i := range dirty {
		d.written[string(i.FH)] = true
	}
	d.mu.Unlock()
	if sn.permits != nil {
		sn.permits.offWent() // again: the records logged online meanwhile
	}
	sn.sess.SetOffline(true)
	sn.Logger().Warn("server unreachable: disconnected, serving the cache", "unanswered_for", quiet.Round(time.Millisecond), "err", cause)
}

// goOnline: the server answered; calls go to it again.
func (sn *snfsFS) goOnline() {
	d := sn.disc
	// Dirty now (written offline, by the kernel too: passthrough writes are
	// taken in at close and fsync): conflicts of theirs are "disconnected".
	dirty := sn.dirtyInodes(time.Time{})
	d.mu.Lock()
	for _, i := range dirty {
		d.written[string(i.FH)] = true
	}
	d.cut, d.endCut = context.WithCancel(context.Background())
	d.off.Store(false)
	offFor := time.Since(d.since)
	n := len(d.written)
	d.mu.Unlock()
	sn.names.backOnline() // the offline copies go: listed again under a promise
	sn.sess.SetOffline(false)
	sn.Logger().Info("server reachable again: reconnected, writing back what was written while disconnected",
		"disconnected_for", offFor.Round(time.Millisecond), "files_written", n)
}

// reconnected writes back every dirty file after the mount came back
// online (conflicts become copies: reintegrate.go).
func (sn *snfsFS) reconnected() {
	ctx, cancel := sn.stopCtx(5 * time.Minute)
	defer cancel()
	if p := sn.permits; p != nil && p.log.Len() > 0 {
		// The names first: the files written back may be among them.
		n := p.log.Len()
		if err := p.flush(ctx, "reconnection"); err != nil {
			sn.Logger().Warn("reintegration of the modification log after reconnection (what was not sent stays in the log, sent later)", "err", err)
		} else {
			sn.Logger().Info("modification log reintegrated after reconnection", "records", n)
		}
	}
	if p := sn.permits; p != nil && p.log.Len() == 0 {
		p.offTimesAsked() // offline.go
	}
	sn.sendOwedOpens(ctx) // offlinewrite.go; before the CLOSEs owed and the write-backs
	sn.sendOwed(ctx)
	if err := sn.snfsSync(ctx); err != nil {
		sn.Logger().Warn("write-back after reconnection (what failed stays dirty, written back later)", "err", err)
	}
}

// offlineLookup is LookupName while offline: a name is known if an inode
// was last seen under it in dir (a file looked up, opened or written here
// before); otherwise ErrDisconnected (whether it exists is not known).
func (sn *snfsFS) offlineLookup(dir *vfs.Inode, name string) (vfs.Entry, bool, error) {
	var found *vfs.Inode
	for _, i := range sn.allInodes() {
		i.NameMu.Lock()
		ok := i.Name == name && string(i.Dir) == string(dir.FH)
		i.NameMu.Unlock()
		if ok {
			found = i
			break
		}
	}
	if found == nil {
		sn.Logger().Debug("disconnected: a name not known here", "dir", sn.PathOf(dir), "name", name)
		return vfs.Entry{}, true, ErrDisconnected
	}
	found.Mu.Lock()
	if !attrKnownLocked(found) {
		found.Mu.Unlock()
		sn.Logger().Debug("disconnected: no attributes known", sn.PathAttr(found), "fileid", found.FileID)
		return vfs.Entry{}, true, ErrDisconnected
	}
	a := found.ReportLocked()
	found.Mu.Unlock()
	return vfs.Entry{Inode: found, Attr: a, AttrTTL: offlineAttrTTL}, true, nil
}

// attrKnownLocked reports whether i's attributes were ever seen: offline,
// they are served as last seen even if invalidated since (nothing can be
// asked). i.Mu held.
func attrKnownLocked(i *vfs.Inode) bool { return i.Attr.Type != 0 }

// offlineFsync: fsync(2) while offline (or cut by going offline) succeeds
// once the file's data is durable in the cache directory; data held for
// writing through (not cached) cannot be made durable and fails.
func (sn *snfsFS) offlineFsync(f *vfs.File) error {
	i := f.I
	i.Mu.Lock()
	pending := i.WState.Pending()
	cf := snOf(i).cf
	i.Mu.Unlock()
	if pending {
		return ErrDisconnected
	}
	if cf != nil {
		if err := cf.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// SetDisconnected takes fs (snfs mode, --disconnected=auto) offline on
// request (off true: at the loop's next tick, whatever the server answers)
// or lets it come back (off false: online at the next probe the server
// answers). Coda's `cfs disconnect` and `cfs reconnect`. It fails if the
// mount has no disconnected operation.
func SetDisconnected(fs *vfs.FS, off bool) error {
	sn, ok := fs.Ops().(*snfsFS)
	if !ok || sn.disc == nil {
		return errors.New("disconnected operation is off on this mount (--disconnected=auto, snfs mode)")
	}
	sn.disc.forced.Store(off)
	return nil
}

// DisconnectedSince reports whether fs (snfs mode) is offline, and since
// when.
func DisconnectedSince(fs *vfs.FS) (time.Time, bool) {
	sn, ok := fs.Ops().(*snfsFS)
	if !ok || !sn.disc.offline() {
		return time.Time{}, false
	}
	sn.disc.mu.Lock()
	defer sn.disc.mu.Unlock()
	return sn.disc.since, true
}
