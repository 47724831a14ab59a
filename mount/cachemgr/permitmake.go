package cachemgr

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"snfs/mount/cml"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// Objects made locally under a write-back permit (docs/mount.md "The
// mount's side"): so far directories (MKDIR). The new directory is a
// provisional object: its inode has a made-up handle (provFH, which no
// server makes) and file id, and is never re-handled. The name cache lists
// it in its parent, and lists the directory itself as complete and empty
// under the parent's permit (nobody else can see it before the log that
// makes it is sent). While its MKDIR is in the log (live), the mount
// answers locally a lookup in it, its attributes and its listing, and
// removes or renames it locally (permitlocal.go; an MKDIR and an RMDIR of
// it cancel in the optimiser). Anything else (a change in it, an open, a
// setattr, its xattrs, another user's listing) resolves it first (Resolve):
// the log is reintegrated, which makes the object on the server and
// returns its real handle, and the operation works on the real inode. The
// provisional handle is never put on the wire: the name cache neither
// lists nor releases it, the permits table never asks for its permit.
//
// After the reintegration the parent's listing names the real object
// instead, with the attributes the REINTEGRATE reply gave (settled; without
// them it is listed again at its next use). The provisional inode only
// serves what still refers to it (an open descriptor, a working directory,
// the name the kernel keeps under the permit: permitnames.go), each
// operation resolved to the real inode. The real object keeps the
// provisional inode's number while the mount knows either inode (settled:
// vfs.FS.KeepIno), so its st_ino does not change under a live file, and the
// kernel's lookups of it get the node it already has, the provisional
// inode's: a name the kernel keeps of it leads where a lookup would.

// provMagic begins every provisional handle: the server's handles begin
// with their format byte (store's handleFormat), never 0xff.
var provMagic = []byte("\xffsnfsprov")

// provFH is the provisional handle of the object of provisional id id.
func provFH(id uint64) nfs3.FH {
	return binary.BigEndian.AppendUint64(append(nfs3.FH(nil), provMagic...), id)
}

// isProvFH reports whether fh is a provisional handle.
func isProvFH(fh nfs3.FH) bool {
	return len(fh) == len(provMagic)+8 && bytes.HasPrefix(fh, provMagic)
}

// provFileID is the file id the mount reports for a provisional object:
// in vfs.LocalIno's range, which no file system the server exports gives
// an inode. An id is an LSN, from a log's first (the clock's microseconds)
// on: below 2^56 for two thousand years.
func provFileID(id uint64) uint64 { return vfs.LocalIno | id&(1<<56-1) }

// provObj is one object made locally.
type provObj struct {
	id   uint64
	fh   nfs3.FH // provisional
	real nfs3.FH // once reintegrated
	// attr: the real object's attributes as the REINTEGRATE reply gave
	// them (nil: not given), taken by a call that began at attr
	// generation start (vfs.FS.AttrStart); a Resolve whose own
	// reintegration settled the object makes the real inode from them
	// instead of asking GETATTR.
	attr  *nfs3.Fattr
	start uint64
	// creator: a regular file's maker, whose access is recorded (as a
	// CREATE_OPEN's creator's) once the file is resolved; nil then.
	creator *vfs.Cred
	// live: its making record is in the log, not sent; gone: no object on
	// the server (removed before it was sent, or refused).
	live, gone bool
	// more: the names it has besides one, made offline while live
	// (offlinelink.go): the loss of a name while it has more is not its
	// end.
	more int
}

// provTable is the objects made locally, by provisional handle. mu is a
// leaf (taken under an inode's Mu by BusyLocked and snfsTTL).
type provTable struct {
	mu   sync.Mutex
	byFH map[string]*provObj
	byID map[uint64]*provObj
	// byReal: the settled objects by real handle, while their provisional
	// inodes are known (realHeld).
	byReal map[string]*provObj
}

func (t *provTable) add(o *provObj) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byFH == nil {
		t.byFH, t.byID = map[string]*provObj{}, map[uint64]*provObj{}
	}
	t.byFH[string(o.fh)], t.byID[o.id] = o, o
}

// of returns a copy of fh's object (false: unknown: gone and forgotten).
func (t *provTable) of(fh nfs3.FH) (provObj, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.byFH[string(fh)]
	if !ok {
		return provObj{}, false
	}
	return *o, true
}

func (t *provTable) live(fh nfs3.FH) bool {
	o, ok := t.of(fh)
	return ok && o.live
}

// settle records what became of id's object: its real handle, or none,
// and the attributes the reply gave (nil: none).
func (t *provTable) settle(id uint64, real nfs3.FH, attr *nfs3.Fattr, start uint64) (nfs3.FH, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.byID[id]
	if !ok || !o.live {
		return nil, false
	}
	o.live = false
	o.real, o.gone = real, real == nil
	if real != nil {
		o.attr, o.start = attr, start
		if t.byReal == nil {
			t.byReal = map[string]*provObj{}
		}
		t.byReal[string(real)] = o
	}
	delete(t.byID, id)
	if o.gone {
		delete(t.byFH, string(o.fh))
	}
	return o.fh, true
}

// addName: fh's live object got another name (offlinelink.go).
func (t *provTable) addName(fh nfs3.FH) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.byFH[string(fh)]
	if !ok || !o.live {
		return false
	}
	o.more++
	return true
}

// dropName: fh's object lost a name; kept reports whether it has another
// (it is not gone then).
func (t *provTable) dropName(fh nfs3.FH) (kept bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.byFH[string(fh)]
	if !ok || o.more == 0 {
		return false
	}
	o.more--
	return true
}

// takeCreator returns, once, the maker of fh's settled regular file.
func (t *provTable) takeCreator(fh nfs3.FH) (vfs.Cred, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.byFH[string(fh)]
	if !ok || o.live || o.creator == nil {
		return vfs.Cred{}, false
	}
	c := *o.creator
	o.creator = nil
	return c, true
}

// realOfProv returns the real handle of fh's provisional object once the
// server made it (false for any other handle, or one not settled so).
func (sn *snfsFS) realOfProv(fh nfs3.FH) (nfs3.FH, bool) {
	if sn.permits == nil || !isProvFH(fh) {
		return nil, false
	}
	o, ok := sn.permits.made.of(fh)
	if !ok || o.live || o.real == nil {
		return nil, false
	}
	return o.real, true
}

// forget drops fh's settled object (its inode is dropped).
func (t *provTable) forget(fh nfs3.FH) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o, ok := t.byFH[string(fh)]; ok && !o.live {
		delete(t.byFH, string(fh))
		if o.real != nil && t.byReal[string(o.real)] == o {
			delete(t.byReal, string(o.real))
		}
	}
}

// realHeld reports whether real is the real handle of a settled object
// whose provisional inode is still known: that inode's operations resolve
// to the real inode (Resolve), so the real inode must stay while it does
// (BusyLocked), even when the kernel forgets its own node of the real
// handle meanwhile; dropped, an operation in flight on it would leave its
// result on an inode nobody finds again, and the next lookup would make
// one from the older attributes the name cache kept.
func (t *provTable) realHeld(real nfs3.FH) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.byReal[string(real)]
	return ok
}

// LocalMkdir is vfs.Ops.LocalMkdir in snfs mode: an MKDIR made locally
// (localMake), the new directory cached as listed and empty.
func (sn *snfsFS) LocalMkdir(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string, mode uint32) (vfs.Entry, bool, error) {
	if sn.disc.offline() {
		return sn.offlineMake(dir, c, name, nfs3.TypeDir, mode) // offline.go
	}
	return sn.localMake(ctx, dir, c, name, nfs3.TypeDir, mode, func(i *vfs.Inode) {
		sn.names.installEmpty(i, dir, c)
	})
}

// localMake makes a directory or a regular file (typ) locally under
// LocalRemove's conditions (the parent cached under its promise within the
// lease, its permit held, the session's credentials), when name is not in
// the cached listing (an existing name is the server's EEXIST), the parent
// is not itself provisional (its changes go through the server once it is
// resolved) and the mode sets no set-ID bit (clearing one at a write would
// be a SETATTR). made runs on the new inode before its name is cached.
func (sn *snfsFS) localMake(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string, typ nfs3.FType, mode uint32,
	made func(i *vfs.Inode)) (vfs.Entry, bool, error) {
	return sn.localMakeObj(ctx, dir, c, name, typ, mode, "", made)
}

// localMakeObj is localMake, with a symbolic link's target (typ
// nfs3.TypeLnk: mode is ignored, a link's is 0777).
func (sn *snfsFS) localMakeObj(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string, typ nfs3.FType, mode uint32,
	target string, made func(i *vfs.Inode)) (vfs.Entry, bool, error) {
	p := sn.permits
	if p == nil || !p.online || !localCred(c) || name == "" || name == "." || name == ".." || len(name) > maxCachedName ||
		isProvFH(dir.FH) || sn.disc.offline() || typ == nfs3.TypeReg && mode&0o6000 != 0 {
		return vfs.Entry{}, false, nil
	}
	nc := sn.names
	d := nc.usable(ctx, dir)
	if d == nil {
		return vfs.Entry{}, false, nil
	}
	if _, ok := nc.cachedEntry(d, name); ok {
		return vfs.Entry{}, false, nil
	}
	if _, ok := p.get(ctx, dir.FH, false); !ok {
		return vfs.Entry{}, false, nil
	}
	dir.Mu.Lock()
	pa := dir.Attr
	dir.Mu.Unlock()
	m := mode & 0o7777
	now := vfs.NFSTime(time.Now())
	// What the server's mkdir(2) or open(2) makes: the caller's owner, the
	// parent's group when the parent is set-group-ID (and then a
	// directory's set-group-ID bit too), as Linux does.
	a := nfs3.Fattr{Type: typ, Mode: m, Nlink: 1, UID: c.UID, GID: c.GID, FSID: pa.FSID, Atime: now, Mtime: now, Ctime: now}
	op := snfs1.CMLCreate
	switch typ {
	case nfs3.TypeDir:
		op = snfs1.CMLMkdir
		a.Nlink, a.Size, a.Used = 2, 4096, 4096
	case nfs3.TypeLnk:
		// What the server's symlink(2) makes: mode 0777 (never changed),
		// the target's length as size.
		op = snfs1.CMLSymlink
		m, a.Mode, a.Size = 0o777, 0o777, uint64(len(target))
	}
	if pa.Mode&syscall.S_ISGID != 0 {
		a.GID = pa.GID
		if typ == nfs3.TypeDir {
			a.Mode |= syscall.S_ISGID
		}
	}
	var ent vfs.Entry
	done, err := p.logged(func() error {
		if nc.usable(ctx, dir) != d {
			return errNotLocal
		}
		if _, ok := nc.cachedEntry(d, name); ok {
			return errNotLocal
		}
		// The times the mount reports go with the record: the object the
		// server makes shows them too (a descriptor open across the
		// reintegration, fstat after fstat, sees no change).
		at := nfs3.SetTime{How: nfs3.SetToClientTime, Time: now}
		rec := snfs1.CMLRecord{Op: op, Dir: snfs1.ObjRef{FH: dir.FH}, Name: name,
			Attr: nfs3.Sattr{Mode: &m, Atime: at, Mtime: at}}
		if typ == nfs3.TypeLnk {
			// A link has no mode to set: its times only (the server sets
			// them on the link itself, not its target).
			rec.Attr.Mode, rec.Target = nil, target
		}
		id, err := p.log.AppendLazyBased(rec, p.permitBase(dir.FH, name, cent{}, false)) // permitlost.go
		if err != nil {
			sn.FS.Logger().Warn("the modification log", "err", err)
			return errNotLocal
		}
		fh := provFH(id)
		a.FileID = provFileID(id)
		o := &provObj{id: id, fh: fh, live: true}
		if typ == nfs3.TypeReg {
			o.creator = &c
		}
		p.made.add(o)
		i := sn.FS.Inode(fh, &a, sn.FS.AttrStart())
		i.NameMu.Lock()
		i.Dir, i.Name = dir.FH, name
		i.NameMu.Unlock()
		made(i)
		sn.DirChanged(dir, name, i, nil)
		links := 0
		if typ == nfs3.TypeDir {
			links = 1 // its ".."
		}
		sn.localDirChanged(dir, links, now) // permittimes.go
		ent = vfs.Entry{Inode: i, Attr: a, AttrTTL: sn.cfg.CacheTTL, EntryTTL: sn.names.keptTTLOf(dir.FH, fh)}
		return nil
	}, dir.FH)
	if !done {
		return vfs.Entry{}, false, nil
	}
	sn.stats.LocalChanges.Add(1)
	return ent, true, err
}

// installEmpty caches i, a directory just made locally, as listed and
// empty, for c (its maker).
func (nc *nameCache) installEmpty(i, parent *vfs.Inode, c vfs.Cred) {
	i.Mu.Lock()
	gen, a := i.ModGen, i.Attr
	i.Mu.Unlock()
	parent.Mu.Lock()
	pa := parent.Attr
	parent.Mu.Unlock()
	key := string(i.FH)
	ents := []cent{{name: ".", fileID: i.FileID, typ: nfs3.TypeDir, attr: a},
		{name: "..", fileID: parent.FileID, typ: nfs3.TypeDir, attr: pa}}
	d := &cdir{key: key, fh: i.FH, ino: i, modGen: gen, ents: ents,
		index: map[string]int{".": 0, "..": 1}, by: map[string]bool{credKey(c): true}}
	var evicted []*cdir
	nc.mu.Lock()
	if old := nc.dirs[key]; old != nil {
		nc.removeLocked(old)
	}
	d.elem = nc.lru.PushFront(d)
	nc.dirs[key] = d
	evicted = nc.evictLocked()
	nc.mu.Unlock()
	for _, d := range evicted {
		nc.sn.dropKernel(d)
	}
}

// settled: id's object is made on the server (real) or will never be (nil).
// The listing of the provisional directory goes (the real directory is
// listed, under a promise, at its next use). A cached listing that names
// the provisional handle names the real object instead when the reply gave
// its attributes (attr): a lookup then meets the real inode, with no listing
// again and no GETATTR; without them the listing is listed again at its
// next use.
//
// It reports whether a name of the object the kernel keeps (permitnames.go)
// may no longer lead where a lookup would: the provisional inode is still
// known and the object was not made, or is known to the kernel by another
// node.
func (p *permits) settled(id uint64, real nfs3.FH, attr *nfs3.Fattr, start uint64) (namesStale bool) {
	fh, ok := p.made.settle(id, real, attr, start)
	if !ok {
		return false
	}
	if i := p.sn.FS.LookupInode(fh); i != nil {
		// The object keeps the provisional inode's number while the mount
		// knows it (st_ino must not change under a live file): inoalias.go.
		var fileID uint64
		if attr != nil {
			fileID = attr.FileID
		}
		namesStale = real == nil || !p.sn.FS.KeepIno(i, real, fileID)
	}
	nc := p.sn.names
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if d := nc.dirs[string(fh)]; d != nil {
		nc.removeLocked(d)
	}
	repoint := func(d *cdir) bool {
		for k := range d.ents {
			e := &d.ents[k]
			if e.name == "" || string(e.fh) != string(fh) {
				continue
			}
			if nc.covered[string(fh)] == d {
				delete(nc.covered, string(fh))
			}
			if real == nil || attr == nil || attr.Type != e.typ {
				d.stale = true
				return true
			}
			e.fh, e.fileID, e.attr, e.noAttr = append(nfs3.FH(nil), real...), attr.FileID, *attr, false
			nc.covered[string(e.fh)] = d
			return true
		}
		return false
	}
	if d := nc.covered[string(fh)]; d != nil && repoint(d) {
		return namesStale
	}
	for _, d := range nc.dirs {
		repoint(d)
	}
	return namesStale
}

// settleMade takes in what a reintegration did with the objects made
// (their ids): the real handle of each the server made (and the attributes
// its reply gave: got, from a call that began at attribute generation
// start); none for each no longer in the log without one (cancelled by the
// optimiser, or refused and skipped).
func (p *permits) settleMade(made []uint64, got map[uint64]cml.Made, start uint64) {
	if len(made) == 0 {
		return
	}
	left := map[uint64]bool{}
	for _, r := range p.log.Records() {
		if r.New != 0 {
			left[r.New] = true
		}
	}
	stale := false
	for _, id := range made {
		if fh, ok := p.log.Handle(id); ok {
			var attr *nfs3.Fattr
			if m, ok := got[id]; ok && string(m.FH) == string(fh) {
				attr = m.Attr
			}
			stale = p.settled(id, fh, attr, start) || stale
		} else if !left[id] {
			stale = p.settled(id, nil, nil, 0) || stale
		}
	}
	if stale {
		p.sn.names.provNamesStale() // permitnames.go
	}
}

// removedLocally: the provisional directory fh lost its name by a local
// RMDIR: its object will never be on the server.
func (p *permits) removedLocally(fh nfs3.FH) {
	o, ok := p.made.of(fh)
	if !ok {
		return
	}
	p.settled(o.id, nil, nil, 0)
	if i := p.sn.FS.LookupInode(fh); i != nil {
		p.sn.FS.Forget(i) // the kernel's FORGET may have come while it was live
	}
}

// Resolve is vfs.Ops.Resolve in snfs mode.
func (sn *snfsFS) Resolve(ctx context.Context, i *vfs.Inode, local bool) (*vfs.Inode, error) {
	if !isProvFH(i.FH) {
		return i, nil
	}
	p := sn.permits
	if p == nil {
		return nil, nfs3.ErrStale
	}
	for try := 0; ; try++ {
		o, ok := p.made.of(i.FH)
		if !ok {
			// Its record is forgotten once settled and its inode dropped
			// (BusyLocked); an inode dropped comes back when a lookup
			// raced with its FORGET (vfs.FS.Known), and the kernel's node
			// of it works on: the number it keeps names the object the
			// server made (inoalias.go).
			if real, kept := sn.FS.KeptReal(i); kept {
				o, ok = provObj{real: real}, true
			}
		}
		switch {
		case !ok || o.gone:
			sn.FS.Logger().Debug("a locally made object is gone: stale", "fh", i.FH, "known", ok)
			return nil, nfs3.ErrStale // removed (by this mount, or refused)
		case o.live && (local || sn.disc.offline()):
			// Offline, a live object is served as it is (offline.go).
			return i, nil
		case o.real != nil:
			ri := sn.FS.LookupInode(o.real)
			switch {
			case ri != nil:
			case o.attr != nil && try > 0:
				// Reintegrated by this call: the reply's attributes are
				// the object's (an object settled earlier may have
				// changed since, with no inode here to record it).
				ri = sn.FS.Inode(o.real, o.attr, o.start)
			default:
				start := sn.FS.AttrStart()
				a, err := sn.FS.GetattrFH(ctx, sessionCred(), o.real)
				if err != nil {
					return nil, err
				}
				ri = sn.FS.Inode(o.real, a, start)
			}
			// Its maker made it with its own credentials (REINTEGRATE
			// applies the CREATE with them: localMake takes only the
			// session's): it owns the file, as a CREATE_OPEN's creator
			// does, so its opens of it need no ACCESS.
			if c, ok := p.made.takeCreator(i.FH); ok && ri.Type == nfs3.TypeReg {
				sn.seedCreatorAccess(ri, c)
			}
			provTargetTo(i, ri) // permitsymlink.go
			return ri, nil
		case try > 0:
			// Still in the log after a reintegration that returned no
			// error: not expected (reintegrate sends the whole log).
			return nil, errNotReintegrated
		}
		// Not p.flush: a reintegration in progress (which may be sending
		// this very record) is waited for even when the log looks empty.
		// No Sync first: the reintegration flushes the plan it seals, and
		// with it every record written before, before sending any of it;
		// a record a reintegration in progress is sending was flushed with
		// its plan. A separate flush here was a second one per created
		// file's open.
		if err := p.reintegrateKeep(ctx, "a provisional object used", true); err != nil {
			return nil, err
		}
	}
}

// errNotReintegrated: a provisional object's record stayed in the log.
var errNotReintegrated = errors.New("cachemgr: a locally made object was not reintegrated")

// sessionCred is the session's own credentials (a GETATTR of an object
// this mount made).
func sessionCred() vfs.Cred {
	return vfs.Cred{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
}

// provLookup is LookupName in a provisional directory: its listing, or the
// real directory's.
func (sn *snfsFS) provLookup(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string) (vfs.Entry, bool, error) {
	nc := sn.names
	if name != "." && name != ".." && len(name) <= maxCachedName && sn.permits.made.live(dir.FH) {
		if d := nc.usable(ctx, dir); d != nil {
			if _, ok := nc.cachedEntry(d, name); !ok {
				nc.mu.Lock()
				nc.stats.Misses++
				nc.mu.Unlock()
				return vfs.Entry{}, true, nfs3.ErrNoEnt
			}
			// Entries are only ever made in it through the real directory.
		}
	}
	ri, err := sn.Resolve(ctx, dir, false)
	if err != nil {
		return vfs.Entry{}, true, err
	}
	e, err := sn.FS.Lookup(ctx, ri, c, name)
	return e, true, err
}

// provList is ListNames of a provisional directory: its listing for its
// maker, or the real directory's.
func (sn *snfsFS) provList(ctx context.Context, dir *vfs.Inode, c vfs.Cred, open bool) ([]vfs.DirEntry, bool, bool, error) {
	nc := sn.names
	if sn.permits.made.live(dir.FH) {
		if d := nc.usable(ctx, dir); d != nil {
			nc.mu.Lock()
			if d.by[credKey(c)] {
				ents := direntsOf(d.ents)
				nc.stats.Hits++
				nc.mu.Unlock()
				if open {
					return nil, true, true, nil
				}
				return ents, false, true, nil
			}
			nc.mu.Unlock()
		}
	}
	ri, err := sn.Resolve(ctx, dir, false)
	if err != nil {
		return nil, false, true, err
	}
	ents, err := sn.FS.ReadDir(ctx, ri, c)
	return ents, false, true, err
}
