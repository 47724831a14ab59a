package fusefs

import (
	"context"
	"fmt"
	"log"
	"os"
	"syscall"
	"time"

	"snfs/mount/cachemgr"
	"snfs/mount/vfs"
	"snfs/nfs3"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Options for Mount.
type Options struct {
	FsName string // shown in /proc/mounts ("server:/export")
	Debug  bool   // log every FUSE request
	// Passthrough asks the kernel for FUSE passthrough (Linux 6.9+), which
	// snfs mode uses for read opens of files held whole in the cache
	// directory (package vfs, passthrough.go). Without it, or if the kernel
	// does not offer it, every read goes through the mount.
	Passthrough bool
	// NoExec mounts noexec (MS_NOEXEC): no program on the mount runs.
	NoExec bool
	// AllowOther makes a user's mount usable by every user, as root's
	// always is (fusermount3 allows it with user_allow_other in
	// /etc/fuse.conf).
	AllowOther bool
}

// bridge is what all nodes of one mount share.
type bridge struct {
	v *vfs.FS
	// ops: the mode's file operations (vfs.Ops: the NFSv3 core's or the
	// snfs cache manager's), chosen once, at Mount.
	ops   vfs.Ops
	sn    cachemgr.SNFSMode // snfs mode's entry points outside Ops; nil in nfs mode
	creds creds
	life  context.Context
	pt    *ptRaw // registers passthrough backing files (passthrough.go)
	// intrGrace: how long a request must have waited before the kernel's
	// interrupt ends it (ctx.go); 0 in unit tests of the context alone.
	intrGrace time.Duration
}

// Mount mounts v at dir (as root with mount(2) directly, else through
// fusermount3). The caller serves until Wait returns and unmounts with
// Unmount (or umount(2) from outside).
func Mount(life context.Context, dir string, v *vfs.FS, o Options) (*fuse.Server, error) {
	b := &bridge{v: v, ops: v.Ops(), sn: cachemgr.SNFS(v), life: life, intrGrace: interruptGrace}
	rootInode := v.Root()
	root := &node{b: b, vi: rootInode}
	zero := time.Duration(0)
	mo := fuse.MountOptions{
		// As root: mount(2) directly. As another user, mount(2) fails and
		// go-fuse runs the set-user-ID fusermount3 (Debian's fuse3), which
		// refuses allow_other unless /etc/fuse.conf has user_allow_other: a
		// user's mount is for that user (FUSE's default), root's for all.
		DirectMount:              true,
		AllowOther:               os.Geteuid() == 0 || o.AllowOther,
		FsName:                   o.FsName,
		Name:                     "snfs",
		MaxWrite:                 int(min(v.WriteSize(), preferredIOSize)),
		MaxReadAhead:             1 << 20,
		ExplicitDataCacheControl: true,
		DisableXAttrs:            b.sn == nil, // only the snfs protocol has them (xattr.go)
		Options:                  []string{"default_permissions"},
		// A write-shared file is opened FOPEN_DIRECT_IO in snfs mode; without
		// this (Linux 6.6+) the kernel refuses a shared mmap of it (ENODEV),
		// e.g. an open that reaches the server before another client's
		// asynchronous RELEASE. With it the kernel writes back and drops the
		// mapped pages around each direct read and write.
		//
		// HANDLE_KILLPRIV_V2: the kernel does not try to clear set-ID bits
		// itself with a SETATTR of the mode (which the server refuses a
		// writer who is not the owner) but flags the writes that must clear
		// them (ptRaw.Writev); the server clears them (vfs.ClearSetID), and
		// on truncation and chown by itself.
		ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP | fuse.CAP_HANDLE_KILLPRIV_V2,
		// snfs mode, and nfs mode with NLM, serve POSIX locks and flock
		// (lock.go); nfs mode without NLM leaves them to the kernel,
		// local to this machine.
		EnableLocks: v.ServerLocks(),
		Debug:       o.Debug,
		Logger:      log.New(os.Stderr, "fuse: ", log.LstdFlags),
	}
	// Registering a passthrough backing file needs CAP_SYS_ADMIN: a user's
	// mount reads through the mount process.
	if !o.Passthrough || os.Geteuid() != 0 {
		o.Passthrough = false
		mo.DisabledCapabilities |= fuse.CAP_PASSTHROUGH
	}
	if o.NoExec {
		mo.Options = append(mo.Options, "noexec")
	}
	if v.ReadOnly() {
		// The kernel refuses every change itself (EROFS), statfs reports
		// ST_RDONLY and /proc/mounts "ro": MS_RDONLY for mount(2), "ro"
		// for fusermount (and the kernel, which takes it in the data too).
		mo.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_RDONLY
		mo.Options = append(mo.Options, "ro")
	}
	opts := &fs.Options{
		MountOptions:    mo,
		NegativeTimeout: &zero,
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: rootInode.FileID, Gen: rootInode.Gen},
	}
	// fs.Mount, with the raw file system wrapped for passthrough.
	b.pt = newPtRaw(fs.NewNodeFS(root, opts), v, b.ops, b.sn, life)
	srv, ep, err := newServer(b.pt, dir, &opts.MountOptions) // cloexec.go
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	b.pt.srv = srv
	go srv.Serve()
	if err := waitMount(srv); err != nil { // cloexec.go
		ep.close()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	if !ep.usable(srv) {
		ep = nil
	}
	// The epoch's descriptor lives as long as the mount: closed once the
	// server's loops end (unmounted, or the connection aborted).
	go func() {
		srv.Wait()
		ep.close()
	}()
	rootInode.SetNode(root.EmbeddedInode())
	v.SetNotifier(notifier{ep: ep})
	if b.sn != nil && o.Passthrough && srv.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH != 0 {
		b.sn.EnablePassthrough()
	}
	return srv, nil
}

// node is one object, named by its NFS file handle (the vfs inode).
type node struct {
	fs.Inode
	b  *bridge
	vi *vfs.Inode
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeReader         = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeFlusher        = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeReleaser       = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeAccesser       = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeOnForgetter    = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
)

func modeType(t nfs3.FType) uint32 {
	switch t {
	case nfs3.TypeDir:
		return syscall.S_IFDIR
	case nfs3.TypeLnk:
		return syscall.S_IFLNK
	case nfs3.TypeBlk:
		return syscall.S_IFBLK
	case nfs3.TypeChr:
		return syscall.S_IFCHR
	case nfs3.TypeSock:
		return syscall.S_IFSOCK
	case nfs3.TypeFifo:
		return syscall.S_IFIFO
	}
	return syscall.S_IFREG
}

func fillAttr(out *fuse.Attr, a *nfs3.Fattr) {
	out.Ino = a.FileID
	out.Size = a.Size
	out.Blocks = (a.Used + 511) / 512
	out.Atime, out.Atimensec = uint64(a.Atime.Sec), a.Atime.Nsec
	out.Mtime, out.Mtimensec = uint64(a.Mtime.Sec), a.Mtime.Nsec
	out.Ctime, out.Ctimensec = uint64(a.Ctime.Sec), a.Ctime.Nsec
	out.Mode = modeType(a.Type) | a.Mode&0o7777
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.Rdev = uint32(unixMkdev(a.Rdev.Major, a.Rdev.Minor))
	// The preferred I/O size, as the Linux NFS client reports it (its wsize):
	// buffered writers (stdio, cp) then make fewer, larger writes, each of
	// which is a FUSE request (no FUSE write-back cache: snfs mode's writes
	// of a write-shared file must reach the server at once).
	out.Blksize = preferredIOSize
}

// preferredIOSize is st_blksize: the largest FUSE write (MaxWrite's cap).
const preferredIOSize = 1 << 20

func unixMkdev(major, minor uint32) uint64 {
	return uint64(minor&0xff) | uint64(major&0xfff)<<8 | uint64(minor&^0xff)<<12
}

// child makes (or finds: go-fuse dedups by StableAttr) the node of e and
// fills out.
//
// The node's number is the vfs inode's (Inode.Ino): an object made locally
// and since made on the server keeps the number of the local inode it was
// made as, so go-fuse gives its lookups the node the kernel already has of
// it (that local inode's, whose operations resolve to the real one), and
// st_ino stays what it was (vfs/inoalias.go).
func (n *node) child(ctx context.Context, e vfs.Entry, out *fuse.EntryOut) *fs.Inode {
	id := e.Inode.Ino()
	fillAttr(&out.Attr, &e.Attr)
	out.Attr.Ino = id.Ino
	out.SetEntryTimeout(e.EntryTTL)
	out.SetAttrTimeout(e.AttrTTL)
	ch := &node{b: n.b, vi: e.Inode}
	in := n.NewInode(ctx, ch, fs.StableAttr{Mode: modeType(e.Inode.Type), Ino: id.Ino, Gen: id.Gen})
	// go-fuse keeps the node it already has for this StableAttr and drops
	// in: the node the kernel knows stays the one notified (a notification
	// for in would be refused with ENOENT, and a lock grant would leave the
	// kernel's stale pages in place).
	if old, ok := e.Inode.Node().(*fs.Inode); !ok || old.Forgotten() {
		e.Inode.SetNode(in)
	}
	n.b.v.Known(e.Inode)
	return in
}

// known records n's inode as the node of its vfs inode that notifications
// name: the kernel calls only nodes it knows, so this repairs the record if
// a lookup raced with the FORGET of the node recorded before.
func (n *node) known() {
	if in := n.EmbeddedInode(); n.vi.Node() != in {
		n.vi.SetNode(in)
	}
	n.b.v.Known(n.vi)
}

func (n *node) cred(ctx context.Context) vfs.Cred { return n.b.creds.of(ctx) }

// vino is n's vfs inode for an operation. An object made locally under a
// write-back permit has a provisional inode whose handle no call may carry
// (docs/mount.md "The mount's side"): the mode serves on it only what it
// can answer locally (local: a lookup, the attributes, a listing) while its
// object is not reintegrated, and otherwise resolves it to the real inode,
// reintegrating first if needed. Any other inode is itself.
func (n *node) vino(ctx context.Context, local bool) (*vfs.Inode, syscall.Errno) {
	vi, err := n.b.v.Resolve(ctx, n.vi, local)
	if err != nil {
		return nil, errnoOf(err)
	}
	return vi, 0
}

// vnode returns the vfs inode of a go-fuse node of this mount.
func vnode(in *fs.Inode) *vfs.Inode {
	if in == nil {
		return nil
	}
	if nn, ok := in.Operations().(*node); ok {
		return nn.vi
	}
	return nil
}

// objOf is the vfs inode of a child node named in a removal or a rename,
// or of a node whose locks a close releases: a local inode whose object the
// server made since stands for the real inode when the mount has it (its
// opens and locks are counted there: vino resolves to it), and for itself
// otherwise (a live one: the mode removes or renames it locally).
func (n *node) objOf(in *fs.Inode) *vfs.Inode {
	vi := vnode(in)
	if vi == nil {
		return nil
	}
	if ri := n.b.v.KeptBy(vi); ri != nil {
		return ri
	}
	return vi
}

func (n *node) OnForget() { n.b.v.NodeForgotten(n.vi, n.EmbeddedInode()) }

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	vi, errno := n.vino(rctx, true)
	if errno != 0 {
		return nil, errno
	}
	e, err := n.b.v.Lookup(rctx, vi, n.cred(ctx), name)
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.child(ctx, e, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	// Getattr resolves a provisional inode itself (and keeps what the
	// provisional inode knows: its links dropped by a hidden removal).
	a, ttl, err := n.b.v.Getattr(rctx, n.vi, n.cred(ctx))
	if err != nil {
		return errnoOf(err)
	}
	fillAttr(&out.Attr, &a)
	out.Ino = n.StableAttr().Ino // the node's: a local inode's resolved keeps its own
	out.SetTimeout(ttl)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var s vfs.SetAttr
	if m, ok := in.GetMode(); ok {
		s.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		s.UID = &u
	}
	if g, ok := in.GetGID(); ok {
		s.GID = &g
	}
	if sz, ok := in.GetSize(); ok {
		s.Size = &sz
	}
	if in.Valid&fuse.FATTR_ATIME != 0 {
		t := time.Time{}
		if in.Valid&fuse.FATTR_ATIME_NOW == 0 {
			t = time.Unix(int64(in.Atime), int64(in.Atimensec))
		}
		s.Atime = &t
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		t := time.Time{}
		if in.Valid&fuse.FATTR_MTIME_NOW == 0 {
			t = time.Unix(int64(in.Mtime), int64(in.Mtimensec))
		}
		s.Mtime = &t
	}
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return errnoOf(err)
	}
	// The mode resolves an object made locally itself: it may make the
	// change locally (snfs mode's permitsetattr.go).
	vi, errno := n.vino(bctx, true)
	if errno != 0 {
		return errno
	}
	a, ttl, err := n.b.ops.Setattr(bctx, vi, n.cred(ctx), s)
	if err != nil {
		return errnoOf(err)
	}
	fillAttr(&out.Attr, &a)
	out.Ino = n.StableAttr().Ino
	out.SetTimeout(ttl)
	return 0
}

// handle is an open regular file.
type handle struct{ f *vfs.File }

// fileOf is the vfs open of a handle of this mount.
func fileOf(fh fs.FileHandle) (*vfs.File, bool) {
	if h, ok := fh.(*handle); ok {
		return h.f, true
	}
	return nil, false
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.known()
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return nil, 0, errnoOf(err)
	}
	// A regular file made locally is the mode's to open: on its local
	// data, or resolved (snfs mode's permitdata.go).
	vi, errno := n.vino(bctx, n.vi.Type == nfs3.TypeReg)
	if errno != 0 {
		return nil, 0, errno
	}
	f, keep, err := n.b.ops.Open(bctx, vi, n.cred(ctx), int(flags))
	if err != nil {
		return nil, 0, errnoOf(err)
	}
	if passthroughFile(n.b.sn, f) != nil && !n.b.pt.claim(ctx, f) {
		n.b.ops.Release(n.b.life, f)
		return nil, 0, syscall.EIO
	}
	n.b.pt.noteAppend(ctx, f)
	fl := openFlags(f, keep)
	if f.Append() && !keep {
		// An O_APPEND open is direct: the kernel's pages and attributes of
		// a file changed since it cached them go explicitly.
		n.NotifyContent(0, 0)
		return &handle{f}, fl, 0
	}
	if fl != 0 {
		return &handle{f}, fl, 0
	}
	// The file changed since the kernel cached it: its pages go (no
	// KEEP_CACHE), and so do its attributes, so that the size it reads up
	// to is the new one.
	n.NotifyContent(-1, 0)
	return &handle{f}, 0, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return nil, nil, 0, errnoOf(err)
	}
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	e, f, err := n.b.ops.Create(bctx, vi, n.cred(ctx), name, mode, flags&syscall.O_EXCL != 0, int(flags))
	if err != nil {
		return nil, nil, 0, errnoOf(err)
	}
	if passthroughFile(n.b.sn, f) != nil && !n.b.pt.claim(ctx, f) {
		n.b.ops.Release(n.b.life, f)
		return nil, nil, 0, syscall.EIO
	}
	n.b.pt.noteAppend(ctx, f)
	return n.child(ctx, e, out), &handle{f}, openFlags(f, false), 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f, ok := fileOf(fh)
	if !ok {
		return nil, syscall.EBADF
	}
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	k, err := n.b.ops.Read(rctx, f, uint64(off), dest)
	if err != nil {
		return nil, errnoOf(err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f, ok := fileOf(fh)
	if !ok {
		return 0, syscall.EBADF
	}
	// Interruptible: the vfs takes none of the data before it has room for
	// it (nfs mode waits for a flush first), and a write-through (snfs
	// mode) finishes once its data is taken (vfs.FS.Write).
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	k, err := n.b.ops.Write(rctx, f, uint64(off), data)
	if err != nil {
		return 0, errnoOf(err)
	}
	if n.b.pt.killsSetID(ctx) {
		// The data is taken: the bits go whatever the interrupt (a
		// step that changes the server's state, ctx.go).
		if err := n.b.v.ClearSetID(n.b.life, f); err != nil {
			return 0, errnoOf(err)
		}
	}
	return uint32(k), 0
}

func (n *node) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	f, ok := fileOf(fh)
	if !ok {
		return 0
	}
	// close(2) is not abandoned (ctx.go): in snfs mode it may be the
	// protocol's CLOSE, and the kernel closes the file whatever the answer.
	err := n.b.ops.Flush(n.b.life, f)
	n.releaseLocks(ctx) // after the write-back: the next holder sees the data
	return errnoOf(err)
}

func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	f, ok := fileOf(fh)
	if !ok {
		return 0 // a directory: its changes are the server's
	}
	// Not abandoned once begun (ctx.go): in snfs mode a write-back the
	// server fenced is reintegrated, which keeps the data under a new name.
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return errnoOf(err)
	}
	return errnoOf(n.b.ops.Fsync(bctx, f))
}

func (n *node) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	f, ok := fileOf(fh)
	if !ok {
		return 0
	}
	n.releaseLocks(ctx)
	// The kernel does not wait for RELEASE, nor can it be interrupted; it
	// is the protocol's CLOSE in snfs mode, done with the mount's context.
	return errnoOf(n.b.ops.Release(n.b.life, f))
}

// Allocate is fallocate(2): in snfs mode the server's (SNFS ALLOCATE); in
// nfs mode EOPNOTSUPP, as Linux's NFSv3 client answers (NFSv3 has no
// ALLOCATE). The kernel updates its own size after a mode-0 allocation and
// drops its pages of a punched range.
func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return errnoOf(err)
	}
	f, ok := fileOf(fh)
	if !ok {
		return syscall.EBADF
	}
	return errnoOf(n.b.ops.Allocate(bctx, f, off, size, mode))
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return nil, errnoOf(err)
	}
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return nil, errno
	}
	e, err := n.b.v.Mkdir(bctx, vi, n.cred(ctx), name, mode)
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.child(ctx, e, out), 0
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return nil, errnoOf(err)
	}
	var t nfs3.FType
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		t = nfs3.TypeFifo
	case syscall.S_IFSOCK:
		t = nfs3.TypeSock
	case syscall.S_IFCHR:
		t = nfs3.TypeChr
	case syscall.S_IFBLK:
		t = nfs3.TypeBlk
	case syscall.S_IFREG, 0:
		vi, errno := n.vino(bctx, false)
		if errno != 0 {
			return nil, errno
		}
		e, f, err := n.b.ops.Create(bctx, vi, n.cred(ctx), name, mode, true, syscall.O_WRONLY)
		if err != nil {
			return nil, errnoOf(err)
		}
		n.b.ops.Release(bctx, f)
		return n.child(ctx, e, out), 0
	default:
		return nil, syscall.EINVAL
	}
	major := (dev >> 8) & 0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return nil, errno
	}
	e, err := n.b.v.Mknod(bctx, vi, n.cred(ctx), name, t, mode, major, minor)
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.child(ctx, e, out), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return nil, errnoOf(err)
	}
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return nil, errno
	}
	e, err := n.b.v.Symlink(bctx, vi, n.cred(ctx), name, target)
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.child(ctx, e, out), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	// A link made locally knows its target (LocalSymlink): local.
	vi, errno := n.vino(rctx, true)
	if errno != 0 {
		return nil, errno
	}
	s, err := n.b.v.Readlink(rctx, vi, n.cred(ctx))
	if err != nil {
		return nil, errnoOf(err)
	}
	return []byte(s), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return nil, errnoOf(err)
	}
	t := vnode(target.EmbeddedInode())
	if t == nil {
		return nil, syscall.EXDEV
	}
	t, err = n.b.v.Resolve(bctx, t, false)
	if err != nil {
		return nil, errnoOf(err)
	}
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return nil, errno
	}
	e, err := n.b.v.Link(bctx, t, vi, n.cred(ctx), name)
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.child(ctx, e, out), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return errnoOf(err)
	}
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return errno
	}
	return errnoOf(n.b.v.Remove(bctx, vi, n.cred(ctx), name, n.objOf(n.GetChild(name))))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return errnoOf(err)
	}
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return errno
	}
	return errnoOf(n.b.v.Rmdir(bctx, vi, n.cred(ctx), name))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return errnoOf(err)
	}
	to := vnode(newParent.EmbeddedInode())
	if to == nil {
		return syscall.EXDEV
	}
	if to, err = n.b.v.Resolve(bctx, to, false); err != nil {
		return errnoOf(err)
	}
	const renameNoReplace, renameExchange = 1, 2
	if flags&renameExchange != 0 {
		return syscall.EINVAL // NFSv3 cannot swap two names atomically
	}
	target := n.objOf(newParent.EmbeddedInode().GetChild(newName))
	moved := n.objOf(n.GetChild(name))
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return errno
	}
	return errnoOf(n.b.v.Rename(bctx, vi, name, to, newName, n.cred(ctx), target, moved, flags&renameNoReplace != 0))
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	res, err := n.b.v.Statfs(rctx, n.cred(ctx))
	if err != nil {
		return errnoOf(err)
	}
	const bs = 4096
	out.Bsize, out.Frsize, out.NameLen = bs, bs, 255
	out.Blocks, out.Bfree, out.Bavail = res.TBytes/bs, res.FBytes/bs, res.ABytes/bs
	out.Files, out.Ffree = res.TFiles, res.FFiles
	return 0
}

func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	var want uint32
	dir := n.vi.Type == nfs3.TypeDir
	if mask&4 != 0 { // R_OK
		want |= nfs3.AccessRead
	}
	if mask&2 != 0 { // W_OK
		want |= nfs3.AccessModify | nfs3.AccessExtend
		if dir {
			want |= nfs3.AccessDelete
		}
	}
	if mask&1 != 0 { // X_OK
		if dir {
			want |= nfs3.AccessLookup
		} else {
			want |= nfs3.AccessExecute
		}
	}
	if want == 0 {
		return 0
	}
	vi, errno := n.vino(rctx, false)
	if errno != 0 {
		return errno
	}
	ok, err := n.b.v.Access(rctx, vi, n.cred(ctx), want)
	if err != nil {
		return errnoOf(err)
	}
	if !ok {
		return syscall.EACCES
	}
	return 0
}
