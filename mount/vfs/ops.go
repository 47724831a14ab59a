package vfs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"snfs/nfs3"
)

// Entry is a looked-up or created object: its inode, the attributes to report
// and how long the kernel may cache them and the name.
type Entry struct {
	Inode    *Inode
	Attr     nfs3.Fattr
	AttrTTL  time.Duration
	EntryTTL time.Duration
}

// entry reports i after a call that returned attributes; the name is good for
// as long as its directory's attributes are.
func (fs *FS) entry(dir, i *Inode) Entry {
	now := time.Now()
	i.Mu.Lock()
	e := Entry{Inode: i, Attr: i.ReportLocked(), AttrTTL: i.TTLLocked(now)}
	i.Mu.Unlock()
	dir.Mu.Lock()
	if d, ok := fs.ops.EntryTTLLocked(dir); ok {
		e.EntryTTL = d
	} else if e.EntryTTL = dir.TTLLocked(now); e.EntryTTL == 0 {
		e.EntryTTL = fs.Cfg.AcRegMin
	}
	dir.Mu.Unlock()
	return e
}

// Getattr returns i's attributes, from the cache while they are fresh, and how
// much longer they are.
func (fs *FS) Getattr(ctx context.Context, i *Inode, c Cred) (nfs3.Fattr, time.Duration, error) {
	// A provisional object's attributes are its own while it is local,
	// its real inode's once it is not (Ops.Resolve).
	i, err := fs.ops.Resolve(ctx, i, true)
	if err != nil {
		return nfs3.Fattr{}, 0, err
	}
	now := time.Now()
	i.Mu.Lock()
	if ttl := i.TTLLocked(now); ttl > 0 {
		a := i.ReportLocked()
		i.Mu.Unlock()
		return a, ttl, nil
	}
	i.Mu.Unlock()
	start := fs.AttrStart()
	a, err := fs.GetattrFH(ctx, c, i.FH)
	if err == nfs3.ErrStale {
		// Removed by someone else while open here (or between this
		// client's lookup and open, where no silly rename can help): an
		// open file's attributes stay what they were, with no links, as a
		// local file system's would.
		i.Mu.Lock()
		defer i.Mu.Unlock()
		if i.Opens > 0 {
			a := i.ReportLocked()
			a.Nlink = 0
			return a, 0, nil
		}
	}
	if err != nil {
		return nfs3.Fattr{}, 0, err
	}
	now = time.Now()
	i.Mu.Lock()
	defer i.Mu.Unlock()
	i.PostOpLocked(a, start, now)
	return i.ReportLocked(), i.TTLLocked(now), nil
}

func (fs *FS) dirWcc(dir *Inode, w *nfs3.WccData) {
	dir.Mu.Lock()
	dir.WccLocked(w, time.Now())
	dir.Mu.Unlock()
}

func (fs *FS) dirPostOp(dir *Inode, a *nfs3.Fattr, start uint64) {
	if a == nil {
		return
	}
	dir.Mu.Lock()
	dir.PostOpLocked(a, start, time.Now())
	dir.Mu.Unlock()
}

// Lookup finds name in dir (the mode's cache of directories first).
func (fs *FS) Lookup(ctx context.Context, dir *Inode, c Cred, name string) (Entry, error) {
	if e, ok, err := fs.ops.LookupName(ctx, dir, c, name); ok {
		return e, err
	}
	return fs.LookupCore(ctx, dir, c, name)
}

// LookupCore is Lookup from the server (LOOKUP).
func (fs *FS) LookupCore(ctx context.Context, dir *Inode, c Cred, name string) (Entry, error) {
	start := fs.AttrStart()
	res, err := RPC(ctx, fs, func() (*nfs3.LookupRes, error) { return fs.Client(c).Lookup(ctx, dir.FH, name) })
	if res != nil {
		fs.dirPostOp(dir, res.DirAttr, start)
	}
	if err != nil {
		return Entry{}, err
	}
	a := res.ObjAttr
	if a == nil {
		if a, err = fs.GetattrFH(ctx, c, res.Object); err != nil {
			return Entry{}, err
		}
	}
	i := fs.Inode(res.Object, a, start)
	fs.named(dir, name, i)
	return fs.entry(dir, i), nil
}

// created finishes CREATE, MKDIR, SYMLINK and MKNOD: the handle and attributes
// of the new object, asked for when the reply left them out.
func (fs *FS) created(ctx context.Context, dir *Inode, c Cred, name string, res *nfs3.CreateRes) (Entry, error) {
	fs.dirWcc(dir, &res.DirWcc)
	if res.Object == nil {
		fs.ops.DirChanged(dir, name, nil, errNoObject)
		return fs.Lookup(ctx, dir, c, name)
	}
	a := res.Attr
	if a == nil {
		var err error
		if a, err = fs.GetattrFH(ctx, c, res.Object); err != nil {
			return Entry{}, err
		}
	}
	i := fs.Inode(res.Object, a, attrAlways)
	fs.named(dir, name, i)
	fs.ops.DirChanged(dir, name, i, nil)
	return fs.entry(dir, i), nil
}

// Create makes a regular file and opens it (O_EXCL: GUARDED, else UNCHECKED).
func (fs *FS) Create(ctx context.Context, dir *Inode, c Cred, name string, mode uint32, excl bool, flags int) (Entry, *File, error) {
	return fs.ops.Create(ctx, dir, c, name, mode, excl, flags)
}

// Create is FS.Create in nfs mode.
func (o NFSOps) Create(ctx context.Context, dir *Inode, c Cred, name string, mode uint32, excl bool, flags int) (Entry, *File, error) {
	e, err := o.FS.CreateCore(ctx, dir, c, name, mode, excl, flags)
	if err != nil {
		return Entry{}, nil, err
	}
	f := &File{I: e.Inode, Cred: c, Write: true, Appending: IsAppend(flags)}
	f.DirectIO = f.Appending
	f.SampleWbErr() // wberr.go
	return e, f, nil
}

// CreateCore sends the CREATE of Create and counts the new file's open (its
// File is the mode's to make).
func (fs *FS) CreateCore(ctx context.Context, dir *Inode, c Cred, name string, mode uint32, excl bool, flags int) (Entry, error) {
	return fs.CreateCoreVia(ctx, dir, c, name, mode, excl, flags, nil)
}

// CreateSender sends a Create's CREATE3args some other way than NFSv3 CREATE
// (snfs mode's CREATE_OPEN, which opens the file too) and returns what CREATE
// would: the result whenever the server answered, and a status other than
// OK as an error (as RPC returns it, JUKEBOX retried).
type CreateSender func(args *nfs3.CreateArgs) (*nfs3.CreateRes, error)

// CreateCoreVia is CreateCore with the call sent by send (nil: NFSv3
// CREATE); everything else is CreateCore's.
func (fs *FS) CreateCoreVia(ctx context.Context, dir *Inode, c Cred, name string, mode uint32, excl bool, flags int, send CreateSender) (Entry, error) {
	if err := fs.RefuseChange(); err != nil {
		return Entry{}, err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		return Entry{}, err
	}
	how := nfs3.Unchecked
	if excl {
		how = nfs3.Guarded
	}
	m := mode & 0o7777
	args := &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir.FH, Name: name}, Mode: how, Attr: nfs3.Sattr{Mode: &m}}
	if flags&syscall.O_TRUNC != 0 && !excl {
		// The kernel found no such name, but another client may have made
		// it since: an UNCHECKED CREATE with a size truncates an existing
		// file (RFC 1813 section 3.3.8), as O_TRUNC asks.
		var zero uint64
		args.Attr.Size = &zero
	}
	if send == nil {
		send = func(args *nfs3.CreateArgs) (*nfs3.CreateRes, error) {
			return RPC(ctx, fs, func() (*nfs3.CreateRes, error) { return fs.Client(c).Create(ctx, args) })
		}
	}
	res, err := send(args)
	if err != nil {
		if res != nil {
			fs.dirWcc(dir, &res.DirWcc)
		}
		fs.ops.DirChanged(dir, name, nil, err)
		return Entry{}, err
	}
	e, err := fs.created(ctx, dir, c, name, res)
	if err != nil {
		return Entry{}, err
	}
	i := e.Inode
	i.Mu.Lock()
	i.cached, i.cachedOK, i.pairs = changeOf(&i.Attr), true, nil
	i.Opens++
	i.Mu.Unlock()
	return e, nil
}

// Mkdir makes a directory.
func (fs *FS) Mkdir(ctx context.Context, dir *Inode, c Cred, name string, mode uint32) (Entry, error) {
	if err := fs.RefuseChange(); err != nil {
		return Entry{}, err
	}
	if e, done, err := fs.ops.LocalMkdir(ctx, dir, c, name, mode); done {
		return e, err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		return Entry{}, err
	}
	m := mode & 0o7777
	res, err := RPC(ctx, fs, func() (*nfs3.CreateRes, error) { return fs.Client(c).Mkdir(ctx, dir.FH, name, nfs3.Sattr{Mode: &m}) })
	if err != nil {
		if res != nil {
			fs.dirWcc(dir, &res.DirWcc)
		}
		fs.ops.DirChanged(dir, name, nil, err)
		return Entry{}, err
	}
	return fs.created(ctx, dir, c, name, res)
}

// Symlink makes a symbolic link to target.
func (fs *FS) Symlink(ctx context.Context, dir *Inode, c Cred, name, target string) (Entry, error) {
	if err := fs.RefuseChange(); err != nil {
		return Entry{}, err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		return Entry{}, err
	}
	res, err := RPC(ctx, fs, func() (*nfs3.CreateRes, error) { return fs.Client(c).Symlink(ctx, dir.FH, name, target, nfs3.Sattr{}) })
	if err != nil {
		if res != nil {
			fs.dirWcc(dir, &res.DirWcc)
		}
		fs.ops.DirChanged(dir, name, nil, err)
		return Entry{}, err
	}
	return fs.created(ctx, dir, c, name, res)
}

// Mknod makes a device, FIFO or socket.
func (fs *FS) Mknod(ctx context.Context, dir *Inode, c Cred, name string, typ nfs3.FType, mode uint32, major, minor uint32) (Entry, error) {
	if err := fs.RefuseChange(); err != nil {
		return Entry{}, err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		return Entry{}, err
	}
	m := mode & 0o7777
	args := &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: dir.FH, Name: name}, Type: typ, Attr: nfs3.Sattr{Mode: &m},
		Spec: nfs3.SpecData{Major: major, Minor: minor}}
	res, err := RPC(ctx, fs, func() (*nfs3.CreateRes, error) { return fs.Client(c).Mknod(ctx, args) })
	if err != nil {
		if res != nil {
			fs.dirWcc(dir, &res.DirWcc)
		}
		fs.ops.DirChanged(dir, name, nil, err)
		return Entry{}, err
	}
	return fs.created(ctx, dir, c, name, res)
}

// errNoObject: a create's reply named no object (DirChanged: the cache of
// its directory cannot be brought up to date).
var errNoObject = errors.New("vfs: the reply named no object")

// Readlink reads a symbolic link (once: its target never changes).
func (fs *FS) Readlink(ctx context.Context, i *Inode, c Cred) (string, error) {
	i.Mu.Lock()
	if i.targetOK {
		t := i.target
		i.Mu.Unlock()
		return t, nil
	}
	i.Mu.Unlock()
	start := fs.AttrStart()
	res, err := RPC(ctx, fs, func() (*nfs3.ReadlinkRes, error) { return fs.Client(c).Readlink(ctx, i.FH) })
	if res != nil && res.Attr != nil {
		i.Mu.Lock()
		i.PostOpLocked(res.Attr, start, time.Now())
		i.Mu.Unlock()
	}
	if err != nil {
		return "", err
	}
	i.Mu.Lock()
	i.target, i.targetOK = res.Path, true
	i.Mu.Unlock()
	return res.Path, nil
}

// Link makes name in dir another link to i.
func (fs *FS) Link(ctx context.Context, i, dir *Inode, c Cred, name string) (Entry, error) {
	if err := fs.RefuseChange(); err != nil {
		return Entry{}, err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		return Entry{}, err
	}
	res, err := RPC(ctx, fs, func() (*nfs3.LinkRes, error) { return fs.Client(c).Link(ctx, i.FH, dir.FH, name) })
	if res != nil {
		fs.dirWcc(dir, &res.LinkWcc)
		i.Mu.Lock()
		if res.Attr != nil {
			i.ModifiedLocked(res.Attr, time.Now())
		} else {
			i.InvalidateLocked()
		}
		i.Mu.Unlock()
	}
	if err != nil {
		fs.ops.DirChanged(dir, name, nil, err)
		return Entry{}, err
	}
	fs.named(dir, name, i)
	fs.ops.DirChanged(dir, name, i, nil)
	return fs.entry(dir, i), nil
}

// sillyRename hides child (open, about to lose its name in dir) under a new
// name in dir, removed at its last close.
func (fs *FS) sillyRename(ctx context.Context, dir *Inode, c Cred, name string, child *Inode) (bool, error) {
	if child.IsDir() {
		return false, nil // directories are not renamed away (RMDIR needs them empty anyway)
	}
	child.Mu.Lock()
	// A file with another link outlives this REMOVE: nothing to hide.
	open := child.Opens > 0 && child.SillyName == "" && child.Attr.Nlink <= 1
	child.Mu.Unlock()
	if !open {
		return false, nil
	}
	fs.Mu.Lock()
	fs.silly++
	hidden := fmt.Sprintf(".snfs%016x%04x", child.FileID, fs.silly&0xffff)
	fs.Mu.Unlock()
	res, err := RPC(ctx, fs, func() (*nfs3.RenameRes, error) { return fs.Client(c).Rename(ctx, dir.FH, name, dir.FH, hidden) })
	if res != nil {
		fs.dirWcc(dir, &res.FromWcc)
	}
	fs.ops.DirChanged(dir, name, nil, err)
	if err != nil {
		return false, err
	}
	fs.ops.DirChanged(dir, hidden, child, nil)
	child.Mu.Lock()
	child.InvalidateLocked()
	// The last release may have run during the RENAME, before the hidden
	// name was recorded: then nobody else removes it.
	closed := child.Opens == 0
	if !closed {
		child.SillyDir, child.SillyName = dir.FH, hidden
		child.nlinkDrop++ // until removeHidden
	}
	child.Mu.Unlock()
	if !closed {
		fs.countHidden(dir.FH, 1)
	}
	if closed {
		rres, err := RPC(ctx, fs, func() (*nfs3.WccRes, error) { return fs.Client(c).Remove(ctx, dir.FH, hidden) })
		if rres != nil {
			fs.dirWcc(dir, &rres.Wcc)
		}
		fs.ops.DirChanged(dir, hidden, nil, err)
		if err == nil {
			fs.ops.Removed(child, 0)
		}
		return true, err
	}
	return true, nil
}

// Remove unlinks name from dir; child, if known, is the object it names: if
// it is open it is renamed to a hidden name instead, removed at its last close.
func (fs *FS) Remove(ctx context.Context, dir *Inode, c Cred, name string, child *Inode) error {
	if err := fs.RefuseChange(); err != nil {
		return err
	}
	nlink := linksOf(child)
	if done, err := fs.ops.LocalRemove(ctx, dir, c, name, child, false); done {
		if err == nil && child != nil {
			child.Invalidate() // nlink and ctime changed
			fs.ops.Removed(child, nlink)
		}
		return err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		return err
	}
	if child != nil {
		if done, err := fs.sillyRename(ctx, dir, c, name, child); done || err != nil {
			return err
		}
	}
	res, err := RPC(ctx, fs, func() (*nfs3.WccRes, error) { return fs.Client(c).Remove(ctx, dir.FH, name) })
	if res != nil {
		fs.dirWcc(dir, &res.Wcc)
	}
	fs.ops.DirChanged(dir, name, nil, err)
	if child != nil {
		child.Invalidate() // nlink and ctime changed
	}
	if err == nil {
		fs.ops.Removed(child, nlink)
	}
	return err
}

// Rmdir removes the directory name from dir.
func (fs *FS) Rmdir(ctx context.Context, dir *Inode, c Cred, name string) error {
	if err := fs.RefuseChange(); err != nil {
		return err
	}
	if done, err := fs.ops.LocalRemove(ctx, dir, c, name, nil, true); done {
		return err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		return err
	}
	gone := fs.hiddenGone.Load()
	res, err := RPC(ctx, fs, func() (*nfs3.WccRes, error) { return fs.Client(c).Rmdir(ctx, dir.FH, name) })
	if res != nil {
		fs.dirWcc(dir, &res.Wcc)
	}
	if err == nfs3.ErrNotEmpty && fs.waitHiddenGone(ctx, dir, c, name, gone) {
		res = nil
		res, err = RPC(ctx, fs, func() (*nfs3.WccRes, error) { return fs.Client(c).Rmdir(ctx, dir.FH, name) })
		if res != nil {
			fs.dirWcc(dir, &res.Wcc)
		}
	}
	fs.ops.DirChanged(dir, name, nil, err)
	return err
}

// hiddenReleaseWait bounds how long an RMDIR refused as not empty waits for
// the hidden names of files removed while open to go.
const hiddenReleaseWait = 2 * time.Second

// countHidden adds n to the hidden names pending removal in dir.
func (fs *FS) countHidden(dir nfs3.FH, n int) {
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	if fs.hidden == nil {
		fs.hidden = make(map[string]int)
	}
	fs.hidden[string(dir)] += n
	if fs.hidden[string(dir)] == 0 {
		delete(fs.hidden, string(dir))
	}
}

// waitHiddenGone is for an RMDIR of dir/name the server refused as not
// empty: if the directory holds hidden names of files removed while open, it
// waits (bounded) until their last release has removed them and answers
// whether the RMDIR is worth sending again. The kernel sends RELEASE after
// close(2) has returned, so "unlink an open file, close it, rmdir its
// directory" would otherwise fail for a moment (pjdfstest unlink/14.t).
// gone is fs.hiddenGone from before the refused RMDIR: a hidden name removed
// since may have been the one that made the directory not empty.
func (fs *FS) waitHiddenGone(ctx context.Context, dir *Inode, c Cred, name string, gone uint64) bool {
	res, err := RPC(ctx, fs, func() (*nfs3.LookupRes, error) { return fs.Client(c).Lookup(ctx, dir.FH, name) })
	if err != nil {
		return false
	}
	key := string(res.Object)
	pending := func() bool {
		fs.Mu.Lock()
		defer fs.Mu.Unlock()
		return fs.hidden[key] > 0
	}
	if !pending() {
		return fs.hiddenGone.Load() != gone
	}
	deadline := time.NewTimer(hiddenReleaseWait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for pending() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

// Rename moves from/name to to/newName; target, if known, is the object
// newName names now: if it is open it is hidden first (as Remove does).
// noReplace fails with NFS3ERR_EXIST when newName exists (checked with a
// LOOKUP first: NFSv3 has no atomic form).
//
// moved, if known (nil: not), is the object renamed: it is named newName in to
// afterwards (for the log's paths).
func (fs *FS) Rename(ctx context.Context, from *Inode, name string, to *Inode, newName string, c Cred, target, moved *Inode, noReplace bool) error {
	if err := fs.RefuseChange(); err != nil {
		return err
	}
	nlink := linksOf(target)
	if done, err := fs.ops.LocalRename(ctx, from, name, to, newName, c, target, noReplace); done {
		if err == nil && target != nil && !(from == to && name == newName) {
			target.Invalidate()
			fs.ops.Removed(target, nlink)
		}
		if err == nil {
			fs.named(to, newName, moved)
		}
		return err
	}
	if err := fs.ops.BeforeDirChange(ctx, from, to); err != nil {
		return err
	}
	if noReplace {
		_, err := RPC(ctx, fs, func() (*nfs3.LookupRes, error) { return fs.Client(c).Lookup(ctx, to.FH, newName) })
		if err == nil {
			return nfs3.ErrExist
		} else if err != nfs3.ErrNoEnt {
			return err
		}
	}
	if target != nil {
		if _, err := fs.sillyRename(ctx, to, c, newName, target); err != nil {
			return err
		}
	}
	res, err := RPC(ctx, fs, func() (*nfs3.RenameRes, error) { return fs.Client(c).Rename(ctx, from.FH, name, to.FH, newName) })
	if res != nil {
		fs.dirWcc(from, &res.FromWcc)
		fs.dirWcc(to, &res.ToWcc)
	}
	if !(from == to && name == newName) {
		fs.ops.DirChanged(from, name, nil, err)
	}
	if toErr := err; toErr == nil && moved == nil {
		fs.ops.DirChanged(to, newName, nil, errNoObject) // newName names what the mount does not know
	} else {
		fs.ops.DirChanged(to, newName, moved, toErr)
	}
	if target != nil {
		target.Invalidate()
	}
	if err == nil && target != nil && !(from == to && name == newName) {
		fs.ops.Removed(target, nlink)
	}
	if err == nil {
		fs.named(to, newName, moved)
	}
	return err
}

// SetAttr is what to change in Setattr; nil fields stay.
type SetAttr struct {
	Mode         *uint32
	UID, GID     *uint32
	Size         *uint64
	Atime, Mtime *time.Time // the zero time: the server's current time
}

// Setattr changes i's attributes. A size change first waits for any
// write-back in progress, then drops unwritten data beyond the new size.
func (fs *FS) Setattr(ctx context.Context, i *Inode, c Cred, s SetAttr) (nfs3.Fattr, time.Duration, error) {
	return fs.ops.Setattr(ctx, i, c, s)
}

// Setattr is FS.Setattr in nfs mode.
func (o NFSOps) Setattr(ctx context.Context, i *Inode, c Cred, s SetAttr) (nfs3.Fattr, time.Duration, error) {
	if err := o.FS.RefuseChange(); err != nil {
		return nfs3.Fattr{}, 0, err
	}
	return o.FS.SetattrCore(ctx, i, c, s, nil)
}

// SetattrCore sends the SETATTR of Setattr; taken (if not nil) is called
// with its wcc_data when the server made the change.
func (fs *FS) SetattrCore(ctx context.Context, i *Inode, c Cred, s SetAttr, taken func(*nfs3.WccData)) (nfs3.Fattr, time.Duration, error) {
	sa := nfs3.Sattr{Mode: s.Mode, UID: s.UID, GID: s.GID, Size: s.Size}
	setTime := func(t *time.Time) nfs3.SetTime {
		switch {
		case t == nil:
			return nfs3.SetTime{}
		case t.IsZero():
			return nfs3.SetTime{How: nfs3.SetToServerTime}
		}
		return nfs3.SetTime{How: nfs3.SetToClientTime, Time: NFSTime(*t)}
	}
	sa.Atime, sa.Mtime = setTime(s.Atime), setTime(s.Mtime)
	if s.Atime != nil || s.Mtime != nil {
		// Unwritten data would change mtime after the one set here.
		i.Mu.Lock()
		pending := i.WState.Pending()
		i.Mu.Unlock()
		if pending {
			if err := i.Flush(ctx, true); err != nil {
				return nfs3.Fattr{}, 0, err
			}
		}
	}
	if s.Size != nil {
		// No WRITE in flight may land beyond the new size after it is set.
		i.FlushMu.Lock()
		defer i.FlushMu.Unlock()
		i.Mu.Lock()
		i.WState.truncate(*s.Size)
		i.Mu.Unlock()
	}
	if s.Mode != nil {
		m := *s.Mode & 0o7777
		sa.Mode = &m
	}
	res, err := RPC(ctx, fs, func() (*nfs3.WccRes, error) {
		return fs.Client(c).Setattr(ctx, &nfs3.SetattrArgs{Object: i.FH, New: sa})
	})
	if err == nil && taken != nil {
		taken(&res.Wcc)
	}
	now := time.Now()
	i.Mu.Lock()
	defer i.Mu.Unlock()
	if res != nil {
		i.WccLocked(&res.Wcc, now)
	}
	if err != nil {
		return nfs3.Fattr{}, 0, err
	}
	if i.AttrAt.IsZero() {
		i.Mu.Unlock()
		start := fs.AttrStart()
		a, err := fs.GetattrFH(ctx, c, i.FH)
		i.Mu.Lock()
		if err != nil {
			return nfs3.Fattr{}, 0, err
		}
		i.PostOpLocked(a, start, time.Now())
	}
	return i.ReportLocked(), i.TTLLocked(time.Now()), nil
}

// Access reports whether c may access i as ACCESS3 bits want ask.
func (fs *FS) Access(ctx context.Context, i *Inode, c Cred, want uint32) (bool, error) {
	got, err := fs.AccessBits(ctx, i, c, want)
	return err == nil && got&want == want, err
}

// AccessBits asks the server which of the ACCESS3 bits want c may use on i.
func (fs *FS) AccessBits(ctx context.Context, i *Inode, c Cred, want uint32) (uint32, error) {
	if accessChanges(want) && (i.Type == nfs3.TypeReg || i.Type == nfs3.TypeDir || i.Type == nfs3.TypeLnk) {
		// access(2) of a read-only file system: EROFS for its files,
		// directories and links (a device's or FIFO's is not a change of
		// the file system).
		if err := fs.RefuseChange(); err != nil {
			return 0, err
		}
	}
	start := fs.AttrStart()
	res, err := RPC(ctx, fs, func() (*nfs3.AccessRes, error) { return fs.Client(c).Access(ctx, i.FH, want) })
	if res != nil && res.Attr != nil {
		i.Mu.Lock()
		i.PostOpLocked(res.Attr, start, time.Now())
		i.Mu.Unlock()
	}
	if err != nil {
		return 0, err
	}
	return res.Access & want, nil
}

// Statfs is FSSTAT.
func (fs *FS) Statfs(ctx context.Context, c Cred) (*nfs3.FsstatRes, error) {
	res, err := RPC(ctx, fs, func() (*nfs3.FsstatRes, error) { return fs.Client(c).Fsstat(ctx, fs.root.FH) })
	return res, err
}

// DirEntry is one name of a listing, with its object when READDIRPLUS gave
// its handle and attributes.
type DirEntry struct {
	Name   string
	FileID uint64
	Type   nfs3.FType // 0 when unknown
	Entry  *Entry     // nil when the listing did not carry it
}

// OpenDir and ReleaseDir count a directory's opens (an open directory
// removed elsewhere keeps answering fstat).
func (fs *FS) OpenDir(i *Inode) {
	i.Mu.Lock()
	i.Opens++
	i.Mu.Unlock()
}

// ReleaseDir ends an OpenDir.
func (fs *FS) ReleaseDir(i *Inode) {
	i.Mu.Lock()
	i.Opens--
	i.Mu.Unlock()
}

// OpenDirCached decides an open of dir by c: cached reports whether the
// kernel may keep and fill its cache of the listing (FOPEN_KEEP_CACHE and
// FOPEN_CACHE_DIR), and ents, when not nil, is the listing read from the
// server for this open. The kernel's listing is good while dir's attributes
// are fresh (the attribute cache, AcDirMin..AcDirMax) and show the version
// they showed when the kernel was first let cache it: the Linux client keeps
// a directory's pages the same way. An open by credentials that have not
// listed dir at that version reads it (the server checks their permission);
// so an open served from the kernel's cache costs no call while the
// attributes are fresh. Any other version, this client's own changes
// included (the kernel resets its listing after its own, but not after a
// silly-renamed file removed at release), makes this open uncached, which
// drops the kernel's listing, and the next open caches again.
func (fs *FS) OpenDirCached(ctx context.Context, dir *Inode, c Cred) (ents []DirEntry, cached bool, err error) {
	if ents, cached, ok, err := fs.ops.ListNames(ctx, dir, c, true); ok {
		return ents, cached, err
	}
	if _, _, err := fs.Getattr(ctx, dir, c); err != nil {
		return nil, false, err
	}
	dir.Mu.Lock()
	v := changeOf(&dir.Attr)
	wasOK := dir.listedOK
	if wasOK && dir.listed != v {
		dir.listedOK, dir.listedBy, dir.listing = false, nil, nil // changed: this open drops the kernel's listing
	} else if dir.listedForLocked(c) {
		dir.Mu.Unlock()
		return nil, true, nil
	}
	same := wasOK && dir.listedOK
	dir.Mu.Unlock()
	if ents, err = fs.ReadDirCore(ctx, dir, c); err != nil {
		return nil, false, err
	}
	dir.Mu.Lock()
	defer dir.Mu.Unlock()
	switch {
	case wasOK && !same:
		return ents, false, nil
	case !dir.listedOK && !wasOK:
		// Nothing cached in the kernel since the last drop: cache from here
		// on, at the version seen before the listing was read (a change
		// in between only makes the next open read again).
		dir.listed, dir.listedOK, dir.listedBy = v, true, map[string]bool{}
	}
	if !dir.listedOK || dir.listed != v {
		return ents, false, nil
	}
	dir.listedBy[c.Key()] = true
	dir.listing = make([]DirEntry, len(ents))
	for k, e := range ents {
		dir.listing[k] = DirEntry{Name: e.Name, FileID: e.FileID, Type: e.Type}
	}
	return ents, true, nil
}

// listedForLocked reports whether the kernel's listing of dir is good for
// c: c listed dir at the version its attributes show now (OpenDirCached).
// Called with dir.mu held.
func (dir *Inode) listedForLocked(c Cred) bool {
	return dir.listedOK && dir.listed == changeOf(&dir.Attr) && dir.listedBy[c.Key()]
}

// ListedDir is the listing for an open OpenDirCached let the kernel serve
// from its cache, when the kernel asks for it after all: Linux may not
// keep (or not finish filling) its copy, and that is no change of the
// directory. While dir stays at the version it was listed at, by c, the
// listing kept then answers, without a call; its entries carry no
// attributes (lookups go the usual way). Otherwise it is read again.
func (fs *FS) ListedDir(ctx context.Context, dir *Inode, c Cred) ([]DirEntry, error) {
	if ents, _, ok, err := fs.ops.ListNames(ctx, dir, c, false); ok {
		return ents, err
	}
	if _, _, err := fs.Getattr(ctx, dir, c); err != nil {
		return nil, err
	}
	dir.Mu.Lock()
	if dir.listedForLocked(c) && dir.listing != nil {
		ents := dir.listing
		dir.Mu.Unlock()
		fs.stats.ListingsKept.Add(1)
		return ents, nil
	}
	dir.Mu.Unlock()
	return fs.ReadDirCore(ctx, dir, c)
}

// ReadDir lists dir (the mode's cache of directories first).
func (fs *FS) ReadDir(ctx context.Context, dir *Inode, c Cred) ([]DirEntry, error) {
	if ents, _, ok, err := fs.ops.ListNames(ctx, dir, c, false); ok {
		return ents, err
	}
	return fs.ReadDirCore(ctx, dir, c)
}

// ReadDirCore is ReadDir from the server (READDIRPLUS; READDIR when the
// server does not do PLUS).
func (fs *FS) ReadDirCore(ctx context.Context, dir *Inode, c Cred) ([]DirEntry, error) {
	// ReadDirAll returns a status as its error (its replies are many).
	list := func(plus bool) ([]nfs3.Entry, error) {
		var all []nfs3.Entry
		err := fs.do(ctx, func() (nfs3.Status, error) {
			var err error
			all, err = fs.Client(c).ReadDirAll(ctx, dir.FH, plus)
			if st, ok := err.(nfs3.Status); ok {
				return st, nil
			}
			return 0, err
		})
		return all, err
	}
	start := fs.AttrStart()
	all, err := list(true)
	if err == nfs3.ErrNotSupp {
		all, err = list(false)
	}
	if err != nil {
		return nil, err
	}
	out := make([]DirEntry, 0, len(all))
	for _, e := range all {
		d := DirEntry{Name: e.Name, FileID: e.FileID}
		if e.Attr != nil {
			d.Type = e.Attr.Type
			if e.Handle != nil && e.Name != "." && e.Name != ".." {
				ci := fs.Inode(e.Handle, e.Attr, start)
				fs.named(dir, e.Name, ci)
				en := fs.entry(dir, ci)
				d.Entry = &en
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// linksOf is i's link count as last seen (0 if i is nil).
func linksOf(i *Inode) uint32 {
	if i == nil {
		return 0
	}
	i.Mu.Lock()
	defer i.Mu.Unlock()
	return i.Attr.Nlink
}

// XattrCreate and XattrReplace are setxattr(2)'s flags.
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// GetXattr returns the value of i's attribute name.
func (fs *FS) GetXattr(ctx context.Context, i *Inode, c Cred, name string) ([]byte, error) {
	return fs.ops.GetXattr(ctx, i, c, name)
}

// ListXattrs returns the names of i's user attributes.
func (fs *FS) ListXattrs(ctx context.Context, i *Inode, c Cred) ([]string, error) {
	return fs.ops.ListXattrs(ctx, i, c)
}

// SetXattr sets i's attribute name to value; flags is setxattr(2)'s.
func (fs *FS) SetXattr(ctx context.Context, i *Inode, c Cred, name string, value []byte, flags uint32) error {
	return fs.ops.SetXattr(ctx, i, c, name, value, flags)
}

// RemoveXattr removes i's attribute name.
func (fs *FS) RemoveXattr(ctx context.Context, i *Inode, c Cred, name string) error {
	return fs.ops.RemoveXattr(ctx, i, c, name)
}

// Allocate is fallocate(2) of length bytes at off of f's file, with mode.
func (fs *FS) Allocate(ctx context.Context, f *File, off, length uint64, mode uint32) error {
	return fs.ops.Allocate(ctx, f, off, length, mode)
}
