package fusefs

import (
	"context"
	"syscall"

	"snfs/mount/vfs"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirHandle is an open directory: the listing read at opendir, whose
// READDIRPLUS attributes and handles answer the kernel's lookups. An open
// served from the kernel's cached listing reads none unless the kernel asks
// after all (its cache was evicted): then at the first READDIR.
type dirHandle struct {
	n       *node
	entries []vfs.DirEntry
	loaded  bool
	kept    bool // opened for the kernel to serve from its cache: a READDIR after all reads the kept listing
	pos     int
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	vi, errno := n.vino(rctx, true)
	if errno != 0 {
		return nil, 0, errno
	}
	ents, cached, err := n.b.v.OpenDirCached(rctx, vi, n.cred(ctx))
	if err != nil {
		return nil, 0, errnoOf(err)
	}
	n.b.v.OpenDir(n.vi)
	d := &dirHandle{n: n, entries: ents, loaded: ents != nil, kept: cached && ents == nil}
	if cached {
		return d, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_CACHE_DIR, 0
	}
	// Without FOPEN_KEEP_CACHE the kernel drops its cached listing.
	return d, 0, 0
}

func (d *dirHandle) load(ctx context.Context) syscall.Errno {
	rctx, cancel := d.n.b.reqCtx(ctx)
	defer cancel()
	if d.loaded {
		return 0
	}
	read := d.n.b.v.ReadDir
	if d.kept {
		read = d.n.b.v.ListedDir // the kernel let go of the listing it was told to keep
	}
	vi, errno := d.n.vino(rctx, true)
	if errno != 0 {
		return errno
	}
	ents, err := read(rctx, vi, d.n.cred(ctx))
	if err != nil {
		return errnoOf(err)
	}
	d.entries, d.loaded = ents, true
	return 0
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) { d.n.b.v.ReleaseDir(d.n.vi) }

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if errno := d.load(ctx); errno != 0 {
		return nil, errno
	}
	if d.pos >= len(d.entries) {
		return nil, 0
	}
	e := d.entries[d.pos]
	d.pos++
	de := &fuse.DirEntry{Name: e.Name, Ino: d.n.b.v.DirIno(e), Off: uint64(d.pos)}
	if e.Type != 0 {
		de.Mode = modeType(e.Type)
	} else {
		de.Mode = 0 // unknown: DT_UNKNOWN, the kernel looks it up
	}
	return de, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if errno := d.load(ctx); errno != 0 {
		return errno
	}
	if off > uint64(len(d.entries)) {
		off = uint64(len(d.entries))
	}
	d.pos = int(off)
	return 0
}

func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if k := d.pos - 1; k >= 0 && k < len(d.entries) && d.entries[k].Name == name && d.entries[k].Entry != nil {
		return d.n.child(ctx, *d.entries[k].Entry, out), 0
	}
	return d.n.Lookup(ctx, name, out)
}

// Fsyncdir: snfs mode makes the directory's logged changes durable and
// sends them to the server (SyncDir: write-back permits); nothing else. Not
// abandoned once begun, as FSYNC (ctx.go): it sends the log and then the
// data of the files it made, and an interrupt (any signal of the caller's
// thread: Go's preemption) left that data unsent while the fsync the
// application repeated after EINTR found the log empty and succeeded.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if d.n.b.sn == nil {
		return 0
	}
	bctx, err := d.n.b.begun(ctx)
	if err != nil {
		return errnoOf(err)
	}
	return errnoOf(d.n.b.sn.SyncDir(bctx, d.n.vi))
}
