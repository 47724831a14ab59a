package client

import (
	"context"

	"snfs/mount3"
	"snfs/nfs3"
	"snfs/sunrpc"
)

// Mounter talks MOUNT v3.
type Mounter struct{ *sunrpc.Client }

// DialMount connects to a MOUNT v3 server at addr ("host:port") over network.
func DialMount(ctx context.Context, network, addr string, opts ...sunrpc.DialOption) (*Mounter, error) {
	c, err := sunrpc.Dial(ctx, network, addr, mount3.Program, mount3.Version, opts...)
	if err != nil {
		return nil, err
	}
	return &Mounter{c}, nil
}

// Mnt asks for the root handle of path.
func (m *Mounter) Mnt(ctx context.Context, path string) (*mount3.MntRes, error) {
	var res mount3.MntRes
	err := m.Call(ctx, mount3.ProcMnt, &mount3.DirPath{Path: path}, &res)
	return &res, err
}

// Umnt tells the server the client no longer uses path.
func (m *Mounter) Umnt(ctx context.Context, path string) error {
	return m.Call(ctx, mount3.ProcUmnt, &mount3.DirPath{Path: path}, nil)
}

// Umntall tells the server the client uses nothing.
func (m *Mounter) Umntall(ctx context.Context) error {
	return m.Call(ctx, mount3.ProcUmntall, nil, nil)
}

// Dump lists the mounts the server knows of.
func (m *Mounter) Dump(ctx context.Context) (mount3.MountList, error) {
	var res mount3.MountList
	err := m.Call(ctx, mount3.ProcDump, nil, &res)
	return res, err
}

// Export lists the server's exports.
func (m *Mounter) Export(ctx context.Context) (mount3.Exports, error) {
	var res mount3.Exports
	err := m.Call(ctx, mount3.ProcExport, nil, &res)
	return res, err
}

// NFS talks NFSv3.
type NFS struct{ *sunrpc.Client }

// DialNFS connects to an NFSv3 server at addr ("host:port") over network.
func DialNFS(ctx context.Context, network, addr string, opts ...sunrpc.DialOption) (*NFS, error) {
	c, err := sunrpc.Dial(ctx, network, addr, nfs3.Program, nfs3.Version, opts...)
	if err != nil {
		return nil, err
	}
	return &NFS{c}, nil
}

// As returns a client sharing c's connection that sends AUTH_SYS with uid, gid, groups.
func (c *NFS) As(uid, gid uint32, groups ...uint32) *NFS {
	return &NFS{c.WithAuth(sunrpc.EncodeAuthSys(sunrpc.AuthSysParams{MachineName: "snfs-client", UID: uid, GID: gid, GIDs: groups}))}
}

func call[R any, PR interface {
	*R
	Decode(*xdrReader) error
}](ctx context.Context, c *NFS, proc uint32, args xdrEncoder) (*R, error) {
	var r R
	err := c.Call(ctx, proc, args, PR(&r))
	return &r, err
}

// Null is NULL.
func (c *NFS) Null(ctx context.Context) error { return c.Call(ctx, nfs3.ProcNull, nil, nil) }

// Getattr is GETATTR.
func (c *NFS) Getattr(ctx context.Context, fh nfs3.FH) (*nfs3.GetattrRes, error) {
	return call[nfs3.GetattrRes](ctx, c, nfs3.ProcGetattr, &nfs3.FHArgs{FH: fh})
}

// Setattr is SETATTR.
func (c *NFS) Setattr(ctx context.Context, a *nfs3.SetattrArgs) (*nfs3.WccRes, error) {
	return call[nfs3.WccRes](ctx, c, nfs3.ProcSetattr, a)
}

// Lookup is LOOKUP.
func (c *NFS) Lookup(ctx context.Context, dir nfs3.FH, name string) (*nfs3.LookupRes, error) {
	return call[nfs3.LookupRes](ctx, c, nfs3.ProcLookup, &nfs3.DirOpArgs{Dir: dir, Name: name})
}

// Access is ACCESS.
func (c *NFS) Access(ctx context.Context, fh nfs3.FH, bits uint32) (*nfs3.AccessRes, error) {
	return call[nfs3.AccessRes](ctx, c, nfs3.ProcAccess, &nfs3.AccessArgs{Object: fh, Access: bits})
}

// Readlink is READLINK.
func (c *NFS) Readlink(ctx context.Context, fh nfs3.FH) (*nfs3.ReadlinkRes, error) {
	return call[nfs3.ReadlinkRes](ctx, c, nfs3.ProcReadlink, &nfs3.FHArgs{FH: fh})
}

// Read is READ.
func (c *NFS) Read(ctx context.Context, fh nfs3.FH, off uint64, count uint32) (*nfs3.ReadRes, error) {
	return call[nfs3.ReadRes](ctx, c, nfs3.ProcRead, &nfs3.ReadArgs{File: fh, Offset: off, Count: count})
}

// Write is WRITE.
func (c *NFS) Write(ctx context.Context, fh nfs3.FH, off uint64, data []byte, stable nfs3.StableHow) (*nfs3.WriteRes, error) {
	return call[nfs3.WriteRes](ctx, c, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Offset: off, Count: uint32(len(data)), Stable: stable, Data: data})
}

// Create is CREATE.
func (c *NFS) Create(ctx context.Context, a *nfs3.CreateArgs) (*nfs3.CreateRes, error) {
	return call[nfs3.CreateRes](ctx, c, nfs3.ProcCreate, a)
}

// Mkdir is MKDIR.
func (c *NFS) Mkdir(ctx context.Context, dir nfs3.FH, name string, attr nfs3.Sattr) (*nfs3.CreateRes, error) {
	return call[nfs3.CreateRes](ctx, c, nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Attr: attr})
}

// Symlink is SYMLINK.
func (c *NFS) Symlink(ctx context.Context, dir nfs3.FH, name, target string, attr nfs3.Sattr) (*nfs3.CreateRes, error) {
	return call[nfs3.CreateRes](ctx, c, nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Attr: attr, Path: target})
}

// Mknod is MKNOD.
func (c *NFS) Mknod(ctx context.Context, a *nfs3.MknodArgs) (*nfs3.CreateRes, error) {
	return call[nfs3.CreateRes](ctx, c, nfs3.ProcMknod, a)
}

// Remove is REMOVE.
func (c *NFS) Remove(ctx context.Context, dir nfs3.FH, name string) (*nfs3.WccRes, error) {
	return call[nfs3.WccRes](ctx, c, nfs3.ProcRemove, &nfs3.DirOpArgs{Dir: dir, Name: name})
}

// Rmdir is RMDIR.
func (c *NFS) Rmdir(ctx context.Context, dir nfs3.FH, name string) (*nfs3.WccRes, error) {
	return call[nfs3.WccRes](ctx, c, nfs3.ProcRmdir, &nfs3.DirOpArgs{Dir: dir, Name: name})
}

// Rename is RENAME.
func (c *NFS) Rename(ctx context.Context, fromDir nfs3.FH, from string, toDir nfs3.FH, to string) (*nfs3.RenameRes, error) {
	return call[nfs3.RenameRes](ctx, c, nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: fromDir, Name: from}, To: nfs3.DirOpArgs{Dir: toDir, Name: to}})
}

// Link is LINK.
func (c *NFS) Link(ctx context.Context, file, dir nfs3.FH, name string) (*nfs3.LinkRes, error) {
	return call[nfs3.LinkRes](ctx, c, nfs3.ProcLink, &nfs3.LinkArgs{File: file, Link: nfs3.DirOpArgs{Dir: dir, Name: name}})
}

// Readdir is READDIR.
func (c *NFS) Readdir(ctx context.Context, a *nfs3.ReaddirArgs) (*nfs3.ReaddirRes, error) {
	return call[nfs3.ReaddirRes](ctx, c, nfs3.ProcReaddir, a)
}

// Readdirplus is READDIRPLUS.
func (c *NFS) Readdirplus(ctx context.Context, a *nfs3.ReaddirplusArgs) (*nfs3.ReaddirRes, error) {
	res := &nfs3.ReaddirRes{Plus: true}
	err := c.Call(ctx, nfs3.ProcReaddirplus, a, res)
	return res, err
}

// Fsstat is FSSTAT.
func (c *NFS) Fsstat(ctx context.Context, fh nfs3.FH) (*nfs3.FsstatRes, error) {
	return call[nfs3.FsstatRes](ctx, c, nfs3.ProcFsstat, &nfs3.FHArgs{FH: fh})
}

// Fsinfo is FSINFO.
func (c *NFS) Fsinfo(ctx context.Context, fh nfs3.FH) (*nfs3.FsinfoRes, error) {
	return call[nfs3.FsinfoRes](ctx, c, nfs3.ProcFsinfo, &nfs3.FHArgs{FH: fh})
}

// Pathconf is PATHCONF.
func (c *NFS) Pathconf(ctx context.Context, fh nfs3.FH) (*nfs3.PathconfRes, error) {
	return call[nfs3.PathconfRes](ctx, c, nfs3.ProcPathconf, &nfs3.FHArgs{FH: fh})
}

// Commit is COMMIT.
func (c *NFS) Commit(ctx context.Context, fh nfs3.FH, off uint64, count uint32) (*nfs3.CommitRes, error) {
	return call[nfs3.CommitRes](ctx, c, nfs3.ProcCommit, &nfs3.CommitArgs{File: fh, Offset: off, Count: count})
}

// ReadDirAll lists a whole directory with READDIRPLUS (or READDIR), following cookies.
func (c *NFS) ReadDirAll(ctx context.Context, dir nfs3.FH, plus bool) ([]nfs3.Entry, error) {
	var all []nfs3.Entry
	var cookie uint64
	var verf [nfs3.CookieVerfSize]byte
	for {
		var res *nfs3.ReaddirRes
		var err error
		if plus {
			res, err = c.Readdirplus(ctx, &nfs3.ReaddirplusArgs{Dir: dir, Cookie: cookie, CookieVerf: verf, DirCount: 32768, MaxCount: 131072})
		} else {
			res, err = c.Readdir(ctx, &nfs3.ReaddirArgs{Dir: dir, Cookie: cookie, CookieVerf: verf, Count: 32768})
		}
		if err != nil {
			return all, err
		}
		if res.Status != nfs3.OK {
			return all, res.Status
		}
		all = append(all, res.Entries...)
		if res.EOF || len(res.Entries) == 0 {
			return all, nil
		}
		cookie, verf = res.Entries[len(res.Entries)-1].Cookie, res.CookieVerf
	}
}
