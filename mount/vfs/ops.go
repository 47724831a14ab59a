package vfs

import (
	"context"
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
// EntryOf is the entry of i as a name in dir (the mode's change made
// locally answers the kernel so).
func (fs *FS) EntryOf(dir, i *Inode) Entry { return fs.entry(dir, i) }

func (fs *FS) entry(dir, i *Inode) Entry {
	now := fs.Now()
	i.Mu.Lock()
	e := Entry{Inode: i, Attr: i.ReportLocked(), AttrTTL: i.TTLLocked(now)}
	i.Mu.Unlock()
	dir.Mu.Lock()
	if d, ok := fs.ops.EntryTTLLocked(dir, i); ok {
		e.EntryTTL = d
	} else if e.EntryTTL = dir.TTLLocked(now); e.EntryTTL == 0 {
		e.EntryTTL = fs.Cfg.AcRegMin
	}
	dir.Mu.Unlock()
	return e
}

// Getattr returns i's attributes, from the cache while they are fresh, and how
// much longer they are (GETATTR, RFC 1813 section 3.3.1).
func (fs *FS) Getattr(ctx context.Context, i *Inode, c Cred) (nfs3.Fattr, time.Duration, error) {
	// A provisional object's attributes are its own while it is local,
	// its real inode's once it is not (Ops.Resolve).
	ri, err := fs.ops.Resolve(ctx, i, true)
	if err != nil {
		return nfs3.Fattr{}, 0, err
	}
	a, ttl, err := fs.getattrOf(ctx, ri, c)
	if err == nil && ri != i {
		// The provisional inode, open, was hidden by a removal through
		// the server (sillyRename names the inode the kernel named): its
		// links dropped there.
		i.Mu.Lock()
		if d := i.nlinkDrop; d > 0 {
			if a.Nlink > d {
				a.Nlink -= d
			} else {
				a.Nlink = 0
			}
		}
		i.Mu.Unlock()
	}
	return a, ttl, err
}

// getattrOf is Getattr of i, resolved.
func (fs *FS) getattrOf(ctx context.Context, i *Inode, c Cred) (nfs3.Fattr, time.Duration, error) {
	for try := 0; ; try++ {
		now := fs.Now()
		i.Mu.Lock()
		if ttl := i.TTLLocked(now); ttl > 0 {
			a := i.ReportLocked()
			i.Mu.Unlock()
			return a, ttl, nil
		}
		i.Mu.Unlock()
		if try > 0 || !fs.ops.RenewAttrs(ctx, i) {
			break
		}
	}
	fs.ops.BeforeGetattr(ctx, i)
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
	now := fs.Now()
	i.Mu.Lock()
	defer i.Mu.Unlock()
	i.PostOpLocked(a, start, now)
	return i.ReportLocked(), i.TTLLocked(now), nil
}

func (fs *FS) dirWcc(dir *Inode, w *nfs3.WccData) {
	dir.Mu.Lock()
	dir.WccLocked(w, fs.Now())
	dir.Mu.Unlock()
}

func (fs *FS) dirPostOp(dir *Inode, a *nfs3.Fattr, start uint64) {
	if a == nil {
		return
	}
	dir.Mu.Lock()
	dir.PostOpLocked(a, start, fs.Now())
	dir.Mu.Unlock()
}

// Lookup finds name in dir (the mode's cache of directories first; LOOKUP,
// RFC 1813 section 3.3.3).
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

// Readlink reads a symbolic link (once: its target never changes; READLINK,
// RFC 1813 section 3.3.5).
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
		i.PostOpLocked(res.Attr, start, fs.Now())
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

// SetTargetLocked records i's target, a symbolic link's (with i.Mu held):
// snfs mode's link made locally answers its readlink so, without a call.
func (i *Inode) SetTargetLocked(t string) { i.target, i.targetOK = t, true }

// TargetLocked is i's target if known (with i.Mu held).
func (i *Inode) TargetLocked() (string, bool) { return i.target, i.targetOK }

// SetAttr is what to change in Setattr; nil fields stay.
type SetAttr struct {
	Mode         *uint32
	UID, GID     *uint32
	Size         *uint64
	Atime, Mtime *time.Time // the zero time: the server's current time
}

// Setattr changes i's attributes. A size change first waits for any
// write-back in progress, then drops unwritten data beyond the new size
// (SETATTR, RFC 1813 section 3.3.2).
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
	now := fs.Now()
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
		i.PostOpLocked(a, start, fs.Now())
	}
	return i.ReportLocked(), i.TTLLocked(fs.Now()), nil
}

// Access reports whether c may access i as ACCESS3 bits want ask.
func (fs *FS) Access(ctx context.Context, i *Inode, c Cred, want uint32) (bool, error) {
	got, err := fs.AccessBits(ctx, i, c, want)
	return err == nil && got&want == want, err
}

// AccessBits asks the server which of the ACCESS3 bits want c may use on i
// (ACCESS, RFC 1813 section 3.3.4).
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
		i.PostOpLocked(res.Attr, start, fs.Now())
		i.Mu.Unlock()
	}
	if err != nil {
		return 0, err
	}
	return res.Access & want, nil
}

// Statfs is FSSTAT (RFC 1813 section 3.3.18).
func (fs *FS) Statfs(ctx context.Context, c Cred) (*nfs3.FsstatRes, error) {
	res, err := RPC(ctx, fs, func() (*nfs3.FsstatRes, error) { return fs.Client(c).Fsstat(ctx, fs.root.FH) })
	return res, err
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
