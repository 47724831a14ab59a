package vfs

import (
	"context"
	"errors"
	"syscall"

	"snfs/nfs3"
)

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

// Create makes a regular file and opens it (O_EXCL: GUARDED, else UNCHECKED;
// CREATE, RFC 1813 section 3.3.8).
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

// Mkdir makes a directory (MKDIR, RFC 1813 section 3.3.9).
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

// Symlink makes a symbolic link to target (SYMLINK, RFC 1813 section 3.3.10).
func (fs *FS) Symlink(ctx context.Context, dir *Inode, c Cred, name, target string) (Entry, error) {
	if err := fs.RefuseChange(); err != nil {
		return Entry{}, err
	}
	if e, done, err := fs.ops.LocalSymlink(ctx, dir, c, name, target); done {
		return e, err
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
	e, err := fs.created(ctx, dir, c, name, res)
	if err == nil && res.Object != nil && e.Inode.Type == nfs3.TypeLnk {
		// The server stores the target as given, and it never changes:
		// the link's readlink needs no READLINK.
		e.Inode.Mu.Lock()
		e.Inode.SetTargetLocked(target)
		e.Inode.Mu.Unlock()
	}
	return e, err
}

// Mknod makes a device, FIFO or socket (MKNOD, RFC 1813 section 3.3.11).
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

// Link makes name in dir another link to i (LINK, RFC 1813 section 3.3.15).
func (fs *FS) Link(ctx context.Context, i, dir *Inode, c Cred, name string) (Entry, error) {
	if err := fs.RefuseChange(); err != nil {
		return Entry{}, err
	}
	if e, done, err := fs.ops.LocalLink(ctx, i, dir, c, name); done {
		return e, err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		return Entry{}, err
	}
	res, err := RPC(ctx, fs, func() (*nfs3.LinkRes, error) { return fs.Client(c).Link(ctx, i.FH, dir.FH, name) })
	if res != nil {
		fs.dirWcc(dir, &res.LinkWcc)
		i.Mu.Lock()
		if res.Attr != nil {
			i.ModifiedLocked(res.Attr, fs.Now())
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
