package cachemgr

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/state"
	"snfs/state/clientfile"
)

// Reintegration (Coda's, docs/mount.md "Recovery"): dirty data this client
// holds without the server's record of it (the mount restarted, the server
// fenced it, the server refused its reclaim) is written back only if the
// server's file is still the one the data was written over. The cache entry
// records the server's change attributes (size, ctime, mtime) as last seen
// in sync: at an OPEN with nothing to write back and after each write-back.
// If the server's file has other ones now, somebody else changed it: the
// server's file is left alone, and the client's version goes beside it as
// NAME.snfs-conflict-HOST-UNIXTIME, logged, counted and listed in the cache
// directory's conflicts file (`snfs conflicts`).

// ConflictsFile is the name, in the cache directory, of the list of
// conflicts kept: one JSON object (a Conflict) per line.
const ConflictsFile = "conflicts"

// Conflict is one line of the cache directory's conflicts file.
type Conflict struct {
	Time     time.Time `json:"time"`
	Name     string    `json:"name"`     // the file's name, as last seen
	DirFH    string    `json:"dir_fh"`   // its directory's handle (hex)
	Conflict string    `json:"conflict"` // the name of the copy made beside it
	Size     int64     `json:"size"`     // bytes in the copy
	Unknown  int64     `json:"unknown"`  // bytes of it the cache did not hold (zeros)
	Reason   string    `json:"reason"`   // "restart", "fenced", "reclaim refused" or "disconnected"
	FileFH   string    `json:"file_fh"`  // the file's handle (hex)
}

// ReadConflicts returns the conflicts recorded in cacheDir.
func ReadConflicts(cacheDir string) ([]Conflict, error) {
	b, err := os.ReadFile(filepath.Join(cacheDir, ConflictsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Conflict
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var c Conflict
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			continue // a line torn by a crash
		}
		out = append(out, c)
	}
	return out, nil
}

func baseOf(a *nfs3.Fattr) cachedir.Base {
	return cachedir.Base{Size: a.Size, CtimeSec: a.Ctime.Sec, CtimeNsec: a.Ctime.Nsec,
		MtimeSec: a.Mtime.Sec, MtimeNsec: a.Mtime.Nsec}
}

// unchanged reports whether the server's file (a) is still the one cf's
// data was written over: same size and mtime as the recorded base. (Not the
// ctime: this client's own renames, links and mode changes move it, and
// would be taken for another client's change. Every data change moves the
// mtime.) Without a base (a record from before bases were kept) it is taken
// as unchanged.
func unchanged(cf *cachedir.File, a *nfs3.Fattr) bool {
	b, ok := cf.Base()
	if !ok {
		return true
	}
	return sameData(b, baseOf(a))
}

func sameData(x, y cachedir.Base) bool {
	return x.Size == y.Size && x.MtimeSec == y.MtimeSec && x.MtimeNsec == y.MtimeNsec
}

// snfsOwnChange: this client's own SETATTR of i succeeded with w. If it
// changed the file the cache's base describes, the base follows (so that
// the change is not taken for another client's).
func (fs *snfsFS) snfsOwnChange(i *vfs.Inode, w *nfs3.WccData) {
	if w.After == nil {
		return
	}
	cf := cacheFileOrNil(i)
	if cf == nil {
		return
	}
	b, ok := cf.Base()
	if !cf.NeedsWriteBack() || ok && w.Before != nil && sameData(b, cachedir.Base{Size: w.Before.Size,
		MtimeSec: w.Before.Mtime.Sec, MtimeNsec: w.Before.Mtime.Nsec}) {
		cf.SetBase(baseOf(w.After))
	}
}

// checkOpen: an OPEN of i answered attributes a while the cache holds dirty
// data of it. The server records this client as the file's last writer, so
// nobody else can have changed it without calling this client back first,
// unless the server fenced this client meanwhile (and the OPEN unfenced it
// without saying so), or this client's own write-back was cut off part way
// (wbMoving). If the file changed otherwise, the dirty data is saved as a
// conflict copy and dropped, and a fresh cache file is returned.
func (fs *snfsFS) checkOpen(ctx context.Context, i *vfs.Inode, cf *cachedir.File, a *nfs3.Fattr) *cachedir.File {
	if a == nil || !cf.NeedsWriteBack() || unchanged(cf, a) {
		return cf
	}
	// The attributes may be those of this client's own write-back in
	// progress: wait for it (it moves the base), and look again.
	i.FlushMu.Lock()
	defer i.FlushMu.Unlock()
	if cacheFileOrNil(i) != cf {
		// Reintegrated meanwhile (a fenced write-back): start afresh.
		if ncf, err := fs.cacheFile(i); err == nil {
			return ncf
		}
		return cf
	}
	i.Mu.Lock()
	moving := stOf(i).WriteBackMoving()
	i.Mu.Unlock()
	if moving {
		// A write-back of this client's that began and did not finish
		// (a server crash, a broken connection) moved the file itself: the
		// next write-back completes it (as in checkBase).
		return cf
	}
	a, err := fs.GetattrFH(ctx, vfs.Cred{}, i.FH)
	if err != nil || !cf.NeedsWriteBack() || unchanged(cf, a) {
		return cf
	}
	fs.stats.Fenced.Add(1)
	fs.Logger().Warn("OPEN: the server's file changed while this client held dirty data of it (fenced meanwhile): saving ours beside it",
		fs.PathAttr(i), "fileid", i.FileID)
	i.Mu.Lock()
	cred := snOf(i).cred
	i.Mu.Unlock()
	if err := fs.keepConflict(ctx, i.FH, cf, "fenced (seen at OPEN)", cred, a.Mode&0o7777); err != nil {
		// Kept dirty: written back later over the other client's change
		// rather than lost.
		fs.Logger().Error("conflict copy failed; the dirty data stays", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		return cf
	}
	fs.dropCached(i.FH, cf)
	if ncf, err := fs.cacheFile(i); err == nil {
		return ncf
	}
	return cf
}

// recordInSync records, at an OPEN that lets this client cache i, the
// server's change attributes as the base of cf (unless cf holds data not
// yet written back: those are newer than the server's, and the base they
// were written over stays) and where the file is.
func (sn *snfsFS) recordInSync(i *vfs.Inode, cf *cachedir.File, a *nfs3.Fattr) {
	if a != nil && !cf.NeedsWriteBack() {
		cf.SetBase(baseOf(a))
	}
	i.NameMu.Lock()
	parent, name := i.Dir, i.Name
	i.NameMu.Unlock()
	if name != "" {
		cf.SetOrigin(parent, name)
	}
}

// fenced: the server answered SNFS_ERR_FENCED for i (it forgot this client's
// opens and dirty-data record of the file). Clean data is dropped, dirty
// data kept and reintegrated (which OPENs the file again: unfenced).
func (fs *snfsFS) fenced(ctx context.Context, i *vfs.Inode) error {
	fs.stats.Fenced.Add(1)
	fs.Logger().Warn("fenced by the server: dropping the file's clean cached data, reintegrating its dirty data", fs.PathAttr(i), "fileid", i.FileID)
	i.Mu.Lock()
	cf := snOf(i).cf
	dirtyLocked(i)
	acts := fs.applyLocked(i, stOf(i).Fenced())
	i.Mu.Unlock()
	fs.delayed.remove(i) // the kept opens are forgotten
	for _, a := range acts {
		if a.Kind == clientfile.ActInvalidateCache {
			fs.invalidateCache(cf)
		}
	}
	fs.notify(i, acts)
	if cf == nil || !hasAct(acts, clientfile.ActReintegrate) {
		return nil
	}
	return fs.reintegrate(ctx, i.FH, cf, "fenced")
}

// reintegrate writes back cf's dirty data of fh if the server's file is
// unchanged since it was last in sync with the cache, and keeps it as a
// conflict copy beside the file otherwise. It OPENs the file for writing
// (which covers the WRITEs and unfences a fenced client) and CLOSEs it.
func (fs *snfsFS) reintegrate(ctx context.Context, fh nfs3.FH, cf *cachedir.File, reason string) error {
	fs.reintegrating.Lock()
	defer fs.reintegrating.Unlock()
	// No write-back of the file from here to the decision: the OPEN
	// unfences, and a write-back then would go over another client's change.
	locked := fs.LookupInode(fh)
	if locked != nil {
		locked.FlushMu.Lock()
		defer locked.FlushMu.Unlock()
	}
	if !cf.NeedsWriteBack() {
		return nil // another reintegration (or a write-back) did it
	}
	start := fs.AttrStart()
	// As the data's writer: the server checks the OPEN as it (under
	// root_squash the mount's root may not write a user's file).
	wcred := writerOf(cf)
	ok, err := fs.sess.OpenAs(ctx, wcred.UID, wcred.GID, wcred.Groups, fh, state.Write)
	if errors.Is(err, nfs3.ErrAcces) {
		// The writer may no longer write the file (its mode or owner
		// changed meanwhile: somebody else's change, which the base check
		// below finds): the mount's own credential opens it to compare,
		// and failing that the data goes beside it as a conflict copy
		// rather than stay unsent in the cache.
		ok, err = fs.sess.Open(ctx, fh, state.Write)
		if errors.Is(err, nfs3.ErrAcces) {
			if cerr := fs.keepConflict(ctx, fh, cf, reason+" (its writer may no longer write the file)", wcred, 0o600); cerr != nil {
				return fmt.Errorf("reintegration OPEN refused, and the conflict copy failed (the data stays in the cache): %w", cerr)
			}
			fs.dropCached(fh, cf)
			return nil
		}
	}
	if (errors.Is(err, nfs3.ErrStale) || errors.Is(err, nfs3.ErrBadHandle)) && cf.Removing() {
		// This client was removing the file's last link (snfsRemoving):
		// the REMOVE (or the RENAME over it, or the logged change
		// reintegrated) reached the server before the record was dropped.
		// The data goes with the file, as snfsRemoved would have done.
		fs.stats.Cancelled.Add(1)
		fs.Logger().Info("reintegration: the file this client was removing is gone: its unwritten data goes with it",
			"path", fs.PathOfFH(fh, cf), "fh", fmt.Sprintf("%x", []byte(fh)), "reason", reason)
		fs.dropCached(fh, cf)
		return nil
	}
	if errors.Is(err, nfs3.ErrStale) || errors.Is(err, nfs3.ErrBadHandle) {
		// Removed on the server meanwhile: somebody else's change too.
		if cerr := fs.keepConflict(ctx, fh, cf, reason, wcred, 0o644); cerr != nil {
			fs.Logger().Error("reintegration: the file is gone from the server and its conflict copy failed: its unwritten data is lost",
				"path", fs.PathOfFH(fh, cf), "fh", fmt.Sprintf("%x", []byte(fh)), "err", cerr)
		}
		fs.dropCached(fh, cf)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reintegration OPEN: %w", err)
	}
	// The file is there: a removal this client began did not happen (or is
	// still in its modification log, replayed after this): the data is
	// written back as any other.
	cf.SetRemoving(false)
	closeIt := func(dirty bool) {
		if !dirty {
			fs.recordWrittenBack()
		}
		if _, err := fs.sess.Close(ctx, fh, state.Write, dirty); err != nil && !errors.Is(err, nfs3.ErrStale) {
			fs.Logger().Warn("reintegration CLOSE", "path", fs.PathOfFH(fh, cf), "err", err)
		}
	}
	a := ok.Attr
	if a == nil {
		if a, err = fs.GetattrFH(ctx, vfs.Cred{}, fh); err != nil {
			closeIt(true)
			return err
		}
	}
	i := fs.Inode(fh, a, start)
	fs.NamedFromCache(i, cf)
	if _, ok := cf.Writer(); ok {
		i.Mu.Lock()
		snOf(i).cred = wcred // a restarted mount's new inode knows no writer
		i.Mu.Unlock()
	}
	if i != locked {
		// Recovery at start (no inode before): nothing else runs on the
		// file yet, but the lock is what writeBackInodeLocked expects.
		i.FlushMu.Lock()
		defer i.FlushMu.Unlock()
	}
	i.Mu.Lock()
	cred := snOf(i).cred
	i.Mu.Unlock()
	if !unchanged(cf, a) {
		own, err := fs.reconcile(ctx, i, cf, a, ok.OldCacheVersion, reason)
		if err != nil {
			closeIt(true)
			return err
		}
		if !own {
			b, _ := cf.Base()
			fs.Logger().Warn("reintegration: the server's file changed since this client's data was written over it: keeping the server's, saving ours beside it",
				fs.PathAttr(i), "fileid", i.FileID, "reason", reason, "base_size", b.Size, "base_ctime", b.CtimeSec, "size", a.Size, "ctime", a.Ctime.Sec)
			if err := fs.keepConflict(ctx, fh, cf, reason, cred, a.Mode&0o7777); err != nil {
				closeIt(true)
				return fmt.Errorf("conflict copy: %w", err)
			}
			fs.dropCached(fh, cf)
			closeIt(false)
			return nil
		}
	}
	if v := cf.Version(); v != 0 && (v == ok.CacheVersion || v == ok.OldCacheVersion) {
		cf.Relabel(ok.CacheVersion)
	} else {
		cf.SetVersion(ok.CacheVersion, int64(a.Size))
	}
	i.Mu.Lock()
	snOf(i).cf = cf
	stOf(i).Reintegrated(ok.CacheVersion)
	dirtyLocked(i)
	i.Mu.Unlock()
	fs.markDirty(i)
	err = fs.writeBackInodeLocked(ctx, i)
	if err == nil {
		fs.Logger().Info("reintegration: wrote back a file's data", fs.PathAttr(i), "fileid", i.FileID, "reason", reason)
	}
	closeIt(cf.NeedsWriteBack())
	return err
}

// dropCached removes cf from the cache (after its data was saved or lost).
func (sn *snfsFS) dropCached(fh nfs3.FH, cf *cachedir.File) {
	fs := sn.FS
	if i := fs.LookupInode(fh); i != nil {
		i.Mu.Lock()
		var acts []clientfile.Action
		if snOf(i).cf == cf {
			snOf(i).cf = nil
			acts = stOf(i).Dropped()
		}
		i.Mu.Unlock()
		sn.markClean(i)
		if acts == nil {
			fs.NotifyData(i)
		}
		sn.notify(i, acts)
	}
	if err := cf.Remove(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
		fs.Logger().Warn("cache directory: remove", "err", err)
	}
}

// keepConflict saves cf's whole version of the file (the bytes the cache
// holds; zeros where it holds none) as a new file beside it, named
// NAME.snfs-conflict-HOST-UNIXTIME, and records the conflict.
func (fs *snfsFS) keepConflict(ctx context.Context, fh nfs3.FH, cf *cachedir.File, reason string, c vfs.Cred, mode uint32) error {
	parent, name := cf.Origin()
	dir := nfs3.FH(parent)
	if len(dir) == 0 {
		dir = fs.FS.Cfg.Root // where the file was is not known: the export's root
	}
	if name == "" {
		name = "fh-" + hex.EncodeToString(fh)
	}
	if mode == 0 {
		mode = 0o644
	}
	if fs.disc.wroteOffline(fh, false) {
		fs.Logger().Info("conflict of a file written while disconnected", "fh", hex.EncodeToString(fh), "seen_as", reason)
		reason = "disconnected"
	}
	host, _, _ := strings.Cut(fs.sess.Name(), ":")
	cname := fmt.Sprintf("%s.snfs-conflict-%s-%d", name, host, time.Now().Unix())
	nc := fs.Client(c)
	var res *nfs3.CreateRes
	for n := 2; ; n++ {
		var err error
		res, err = vfs.RPC(ctx, fs.FS, func() (*nfs3.CreateRes, error) {
			return nc.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: cname},
				Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
		})
		if errors.Is(err, nfs3.ErrExist) && n < 100 {
			cname = fmt.Sprintf("%s.snfs-conflict-%s-%d-%d", name, host, time.Now().Unix(), n)
			continue
		}
		if err != nil {
			return fmt.Errorf("CREATE %q: %w", cname, err)
		}
		break
	}
	if res.Object == nil {
		return fmt.Errorf("CREATE %q: no handle", cname)
	}
	var size, unknown int64
	buf := make([]byte, fs.WriteSize())
	for off := int64(0); ; {
		n, u, err := cf.ReadKnown(buf, off)
		if err == io.EOF || (err == nil && n == 0) {
			break
		}
		if err != nil {
			return err
		}
		unknown += u
		data := buf[:n]
		for len(data) > 0 {
			wr, err := vfs.RPC(ctx, fs.FS, func() (*nfs3.WriteRes, error) { return nc.Write(ctx, res.Object, uint64(off), data, nfs3.FileSync) })
			if err != nil {
				return fmt.Errorf("WRITE %q: %w", cname, err)
			}
			if wr.Count == 0 {
				return fmt.Errorf("WRITE %q: nothing written", cname)
			}
			data, off = data[wr.Count:], off+int64(wr.Count)
		}
		size = off
	}
	if cs := cf.Size(); cs > size {
		// A size past the last byte the cache holds (a truncation up).
		sz := uint64(cs)
		if _, err := vfs.RPC(ctx, fs.FS, func() (*nfs3.WccRes, error) {
			return nc.Setattr(ctx, &nfs3.SetattrArgs{Object: res.Object, New: nfs3.Sattr{Size: &sz}})
		}); err != nil {
			return fmt.Errorf("SETATTR %q: %w", cname, err)
		}
		size = cs
	}
	fs.stats.Conflicts.Add(1)
	fs.Logger().Warn("conflict: kept this client's version beside the server's", "path", fs.PathFrom(nil, dir, name),
		"copy", fs.PathFrom(nil, dir, cname), "name", name, "conflict", cname,
		"size", size, "unknown_bytes", unknown, "reason", reason)
	rec := Conflict{Time: time.Now().UTC(), Name: name, DirFH: hex.EncodeToString(dir), Conflict: cname,
		Size: size, Unknown: unknown, Reason: reason, FileFH: hex.EncodeToString(fh)}
	if err := appendConflict(fs.cfg.CacheDir, rec); err != nil {
		fs.Logger().Error("recording a conflict in the cache directory", "err", err)
	}
	return nil
}

// appendConflict adds rec to dir's conflicts file, durably.
func appendConflict(dir string, rec Conflict) error {
	if dir == "" {
		return nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, ConflictsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// errChangedUnder: the server's file is not the one the dirty data was
// written over (checkBase).
var errChangedUnder = errors.New("vfs: the server's file changed under this client's dirty data")

// checkBase makes sure, before a write-back, that the server's file is still
// the one cf's dirty data was written over (same size and mtime as the
// base). It normally is: the server records this client as the last writer
// and calls it back before anyone else changes the file. It is not when the
// server fenced this client and something (its own OPEN) unfenced it since
// without this client learning of it: a write-back then would silently go
// over another client's change. A write-back of this client that began and
// was interrupted (wbMoving: the server crashed, or the connection broke,
// after some of its WRITEs were applied) moved the server's file itself, so
// a difference then is this client's own doing and the write-back goes on.
// A fence the server still knows of refuses that write-back
// (SNFS_ERR_FENCED), and reintegration then checks the base strictly
// (fenced); one the server forgot in a restart of its own is not seen (this
// client reclaims the file as its last writer). Called with i.FlushMu held.
func (sn *snfsFS) checkBase(ctx context.Context, i *vfs.Inode, cf *cachedir.File, c vfs.Cred) error {
	fs := sn.FS
	b, ok := cf.Base()
	i.Mu.Lock()
	moving := stOf(i).WriteBackMoving()
	i.Mu.Unlock()
	if !ok || moving {
		return nil
	}
	res, err := vfs.RPC(ctx, fs, func() (*nfs3.GetattrRes, error) { return fs.Client(c).Getattr(ctx, i.FH) })
	if err != nil {
		return fmt.Errorf("GETATTR before write-back: %w", err)
	}
	if !sameData(b, baseOf(&res.Attr)) {
		return errChangedUnder
	}
	return nil
}

// changedUnder: checkBase found the server's file changed under i's dirty
// data. The data is saved as a conflict copy and dropped.
func (fs *snfsFS) changedUnder(ctx context.Context, i *vfs.Inode) error {
	fs.reintegrating.Lock()
	defer fs.reintegrating.Unlock()
	i.FlushMu.Lock()
	defer i.FlushMu.Unlock()
	i.Mu.Lock()
	cf, cred := snOf(i).cf, snOf(i).cred
	i.Mu.Unlock()
	if cf == nil || !cf.NeedsWriteBack() {
		return nil
	}
	a, err := fs.GetattrFH(ctx, cred, i.FH)
	if err != nil {
		return err
	}
	if unchanged(cf, a) {
		return nil // the next write-back goes through
	}
	fs.stats.Fenced.Add(1)
	fs.Logger().Warn("write-back: the server's file changed under this client's dirty data (fenced meanwhile): saving ours beside it",
		fs.PathAttr(i), "fileid", i.FileID)
	if err := fs.keepConflict(ctx, i.FH, cf, "fenced (seen at write-back)", cred, a.Mode&0o7777); err != nil {
		return fmt.Errorf("conflict copy: %w", err)
	}
	fs.dropCached(i.FH, cf)
	return nil
}
