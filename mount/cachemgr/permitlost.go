package cachemgr

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"snfs/mount/cml"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// A permit lost before the log is in (docs/mount.md "A permit lost before
// the log is in"; docs/protocol.md sections 21.4, 21.6 and 21.8). Records
// logged under a directory's write-back permit are applied by the server
// to whatever their names hold when they arrive; while the permit holds,
// nobody else changes the directory. A permit can be lost with records of
// it still in the log: revoked (its recall not answered in time: this
// mount blocked, or killed and mounted again), or gone with a restart (the
// server's: permits are not durable; or this mount's: a new registration
// holds none). Others may then have changed the directory before the
// records arrive. Each name the log changes has its base in the log (the
// object it held on the server before the first of its records left:
// mount/cml's bases, given at each change from the listing kept under the
// permit, in the record's own frame). Before such records are sent again:
//
//   - the directory's permit is asked again (regainAll, as for records
//     logged offline: offlinereint.go), until granted; a GET_PERMIT recalls
//     nothing, so between tries a read of the directory (GETATTR, which
//     recalls another client's permit: docs/protocol.md section 21.4)
//     makes the holder's log go in and its permit end. Still refused, the
//     log waits for a later reintegration: no record refused
//     SNFS_ERR_NOPERMIT becomes a conflict for want of a permit;
//   - each name the log changes in it is looked up and compared with its
//     base (baseChanged); a name someone else changed is poisoned
//     (offlinereint.go): its UNLINK, RMDIR and RENAME records are kept as
//     conflicts, its CREATE, MKDIR and SYMLINK are sent and the server's
//     GUARDED check decides; the other names' records are sent as logged.
//
// Where this differs from the check of records logged offline: the base
// is the object alone, not a regular file's version (size and mtime). A
// file's data is not the permit's (docs/protocol.md section 21.2): under a
// permit held, another client's write of a file the holder then removes is
// no conflict either; and the holder's own write-back of a file it wrote
// before removing it would move the version. The bases are in the log, not
// beside it, and follow each acknowledgement; the offline ones are checked
// once and dropped.

// lostMaxRounds bounds how often one reintegration asks permits again
// after records refused SNFS_ERR_NOPERMIT before the log waits.
const lostMaxRounds = 4

// errPermitsWait: a permit the log needs was refused: nothing is sent.
var errPermitsWait = errors.New("cachemgr: the permits of directories the log changes are not granted yet: the log waits")

// permitBase is the base of name in dir for a record logged under dir's
// permit: e, its entry in the listing kept under the permit (found), else
// none. None when not known (a provisional directory's names: nobody else
// sees it before the log makes it; an object made by a record still in the
// log: that record's base is the name's; a provisional object is given by
// its real handle once the server made it).
func (p *permits) permitBase(dir nfs3.FH, name string, e cent, found bool) []cml.Base {
	if isProvFH(dir) {
		return nil
	}
	b := cml.Base{Dir: dir, Name: name}
	if found {
		fh := e.fh
		if isProvFH(fh) {
			real, ok := p.sn.realOfProv(fh)
			if !ok {
				// Acknowledged but not settled yet (the reintegration
				// taking its reply in): the log has its handle.
				if o, known := p.made.of(fh); known {
					real, ok = p.log.Handle(o.id)
				}
			}
			if !ok {
				return nil
			}
			fh = real
		}
		if fh == nil {
			return nil
		}
		b.FH = fh
	}
	return []cml.Base{b}
}

// markLost: the permits of dirs were lost with records of them in the log.
// A permit of one whose recall was cut (noteCut) is lost too: not reclaimed
// after a later restart (docs/protocol.md section 21.9).
func (p *permits) markLost(dirs ...nfs3.FH) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range dirs {
		if isProvFH(d) {
			continue
		}
		delete(p.cut, string(d))
		if p.lost == nil {
			p.lost = map[string]nfs3.FH{}
		}
		p.lost[string(d)] = append(nfs3.FH(nil), d...)
	}
}

// lostPrepare asks again the permits marked lost and checks the names the
// log changes in their directories (p.reint held). It is not all or
// nothing: the directories whose permits are held (reclaimed after a
// server restart, or asked again) are checked, and taken off the lost set,
// even when another one's permit is refused (then asked again no sooner
// than permitRefusal). The log is then sent: its records up to the first
// of a directory still lost go in (a recall of a reclaimed directory
// whose records all come before it is answered OK), and that one is
// refused SNFS_ERR_NOPERMIT, applied by nothing; the next round waits
// (errPermitsWait). All or nothing, one directory refused held the whole
// log, and a recall of a reclaimed directory failed (its permit revoked).
func (p *permits) lostPrepare(ctx context.Context) error {
	p.mu.Lock()
	if len(p.lost) == 0 {
		p.mu.Unlock()
		return nil
	}
	wait := !p.lostRefused.IsZero() && time.Since(p.lostRefused) < permitRefusal
	// Those held first: their asking costs no call, and a refusal stops
	// the asking of those after it.
	var dirs, rest []nfs3.FH
	for k, d := range p.lost {
		if _, held := p.held[k]; held {
			dirs = append(dirs, d)
		} else if !wait {
			rest = append(rest, d)
		}
	}
	p.mu.Unlock()
	dirs = append(dirs, rest...)
	if len(dirs) == 0 {
		return errPermitsWait
	}
	gone, granted, err := p.regainSome(ctx, dirs)
	if err != nil && !errors.Is(err, errPermitsWait) {
		return err
	}
	p.mu.Lock()
	if errors.Is(err, errPermitsWait) {
		p.lostRefused = time.Now()
	} else if !wait {
		p.lostRefused = time.Time{}
	}
	p.mu.Unlock()
	if len(granted) == 0 && len(gone) == 0 {
		return err
	}
	p.markGone(gone)
	checked := append(append([]nfs3.FH(nil), granted...), gone...)
	for _, n := range p.log.NamesChanged(checked) {
		k := offNameKey(snfs1.ObjRef{FH: n.Dir}, n.Name)
		b, ok := p.log.BaseOf(n.Dir, n.Name)
		if !ok && !n.Made {
			p.sn.FS.Logger().Warn("a name logged under a permit since lost has no base: its removals and renames are conflicts",
				"path", p.sn.FS.PathFrom(nil, n.Dir, n.Name))
			p.poison(k)
			continue
		}
		changed, err := p.baseChanged(ctx, offBase{dir: n.Dir, name: n.Name, fh: b.FH})
		if err != nil {
			return err
		}
		if changed {
			p.poison(k)
		}
	}
	p.off.mu.Lock()
	p.off.checked = true
	p.off.mu.Unlock()
	p.mu.Lock()
	for _, d := range checked {
		delete(p.lost, string(d))
	}
	p.mu.Unlock()
	return nil
}

// probeFirst reports whether the next round of a reintegration should
// send the log under no permit first (probed: done already in this
// reintegration): permits were lost while a batch whose reply was not
// recorded may have been applied (a kill or an error during the call).
// The bases of that batch's names are those before it: compared with
// what the server holds after it, its own records would look like another
// client's changes, and their names be kept as conflicts. The server's
// answer by LSN tells which it applied, and the acknowledgement moves
// their bases.
func (p *permits) probeFirst(probed bool) bool {
	if probed {
		return false
	}
	p.mu.Lock()
	lost := len(p.lost) > 0
	p.mu.Unlock()
	return lost && p.log.MaySent()
}

// regainAll asks for the permits of dirs (offPermitTries each, a read of
// the directory between tries: it recalls another client's permit) and
// returns those of directories gone on the server (NFS3ERR_STALE: their
// records are refused by the server, real conflicts); errPermitsWait if
// one is still refused.
func (p *permits) regainAll(ctx context.Context, dirs []nfs3.FH) (gone []nfs3.FH, err error) {
	gone, _, err = p.regainSome(ctx, dirs)
	if err != nil {
		return nil, err
	}
	return gone, nil
}

// regainSome is regainAll that also returns, with errPermitsWait, what it
// found before the first directory refused: those gone, and those whose
// permits are held (granted); the directories after it are not asked.
func (p *permits) regainSome(ctx context.Context, dirs []nfs3.FH) (gone, granted []nfs3.FH, err error) {
	nc := p.sn.FS.Client(sessionCred())
	for _, d := range dirs {
		ok, stale := false, false
		for try := 0; try < offPermitTries && !ok && !stale; try++ {
			if try > 0 {
				// Another client's permit, or this mount's own still
				// ending: a read waits for its recall (the holder's log
				// goes in first) where GET_PERMIT is refused at once.
				_, gerr := vfs.RPC(ctx, p.sn.FS, func() (*nfs3.GetattrRes, error) { return nc.Getattr(ctx, d) })
				if errors.Is(gerr, nfs3.ErrStale) {
					stale = true
					break
				}
				t := time.NewTimer(time.Duration(try) * 50 * time.Millisecond)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil, nil, ctx.Err()
				case <-t.C:
				}
			}
			_, ok = p.get(ctx, d, true)
		}
		if stale {
			gone = append(gone, d)
			continue
		}
		if !ok {
			p.sn.FS.Logger().Info("reintegration waits for a directory's permit", "dir", p.sn.FS.PathOfFH(d, nil))
			return gone, granted, errPermitsWait
		}
		granted = append(granted, d)
	}
	return gone, granted, nil
}

// markGone: dirs are gone on the server: a record of them refused
// SNFS_ERR_NOPERMIT is a conflict (the directory was removed), not a
// permit to ask again.
func (p *permits) markGone(dirs []nfs3.FH) {
	if len(dirs) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.goneDirs == nil {
		p.goneDirs = map[string]bool{}
	}
	for _, d := range dirs {
		p.goneDirs[string(d)] = true
	}
}

// anyGone reports whether one of dirs is gone on the server (markGone).
func (p *permits) anyGone(dirs []nfs3.FH) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range dirs {
		if p.goneDirs[string(d)] {
			return true
		}
	}
	return false
}

// baseChanged looks b's name up and reports whether it holds another
// object than b's (or, for b's regular file with a version, the same file
// at another version): someone else's change since the base.
func (p *permits) baseChanged(ctx context.Context, b offBase) (bool, error) {
	nc := p.sn.FS.Client(sessionCred())
	res, err := vfs.RPC(ctx, p.sn.FS, func() (*nfs3.LookupRes, error) { return nc.Lookup(ctx, b.dir, b.name) })
	var now nfs3.FH
	switch {
	case err == nil:
		now = res.Object
	case errors.Is(err, nfs3.ErrNoEnt):
	case errors.Is(err, nfs3.ErrStale):
		// The directory is gone on the server (removed by another client
		// or a process there): a change by someone else. Its records go
		// as they are and are refused (conflicts); failing here would
		// hold the whole log back for good.
		p.sn.FS.Logger().Warn("a directory the log changes was removed on the server meanwhile: its records are conflicts",
			"path", p.sn.FS.PathFrom(nil, b.dir, b.name))
		return true, nil
	default:
		return false, fmt.Errorf("LOOKUP of a name the log changes: %w", err)
	}
	if string(now) != string(b.fh) {
		p.sn.FS.Logger().Warn("a name the log changes was changed on the server meanwhile: its removals and renames are conflicts",
			"path", p.sn.FS.PathFrom(nil, b.dir, b.name), "was", hex.EncodeToString(b.fh), "now", hex.EncodeToString(now))
		return true, nil
	}
	if b.ver == nil || len(now) == 0 {
		return false, nil
	}
	var a *nfs3.Fattr
	if err == nil {
		a = res.ObjAttr
	}
	if a == nil {
		ga, gerr := vfs.RPC(ctx, p.sn.FS, func() (*nfs3.GetattrRes, error) { return nc.Getattr(ctx, now) })
		if gerr != nil {
			return false, fmt.Errorf("GETATTR of a file the log removes or replaces: %w", gerr)
		}
		a = &ga.Attr
	}
	if sameData(*b.ver, baseOf(a)) {
		return false, nil
	}
	p.sn.FS.Logger().Warn("a file the log removes or replaces was written on the server meanwhile: its removal and renames are conflicts",
		"path", p.sn.FS.PathFrom(nil, b.dir, b.name), "size", b.ver.Size, "now", a.Size)
	return true, nil
}

// lostDirs are the directories whose permits a record refused
// SNFS_ERR_NOPERMIT needed: those whose entries it changes, or the
// directory a SETATTR changes; a file's SETATTR (of an object made here)
// needs any permit in its batch: its parent's, if known.
func (p *permits) lostDirs(rec *snfs1.CMLRecord) []nfs3.FH {
	out := recordDirs(rec)
	if rec.Op == snfs1.CMLSetattr && rec.Obj.FH != nil {
		i := p.sn.FS.LookupInode(rec.Obj.FH)
		if i == nil {
			return out
		}
		if i.IsDir() {
			return append(out, rec.Obj.FH)
		}
		i.NameMu.Lock()
		parent := i.Dir
		i.NameMu.Unlock()
		if parent != nil && !isProvFH(parent) {
			out = append(out, parent)
		}
	}
	return out
}
