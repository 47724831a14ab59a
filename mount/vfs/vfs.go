package vfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
)

// Cred is the identity a call is made with (AUTH_SYS).
type Cred struct {
	UID, GID uint32
	Groups   []uint32
}

// Key names the credential: equal for equal uid, gid and groups.
func (c Cred) Key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:%d", c.UID, c.GID)
	for _, g := range c.Groups {
		b.WriteByte(',')
		b.WriteString(strconv.FormatUint(uint64(g), 10))
	}
	return b.String()
}

// Config configures an FS.
type Config struct {
	NFS  *client.NFS // the connection (credentials are replaced per call)
	Root nfs3.FH     // the export's root handle (from MNT)

	// Attribute cache timeouts; zero means Linux's defaults.
	AcRegMin, AcRegMax, AcDirMin, AcDirMax time.Duration
	// DirtyLimit is how many bytes of one file may wait in memory before they
	// are written back (and committed) without waiting for close; 0: 8 MiB.
	DirtyLimit int
	Logger     *slog.Logger
	// MountPoint is where the export is mounted, for the paths of files in
	// log messages; "" names them from the export's root ("/src/main.c").
	MountPoint string
	// ReadOnly refuses every change with EROFS (readonly.go).
	ReadOnly bool
	// NLM, if set in nfs mode, sends locks to the server's NLM
	// (nlmlock.go); without it nfs mode's locks are the kernel's, local.
	NLM *NLMConfig
	// Clock, if set, is the attribute cache's time (FS.Now) instead of
	// time.Now: a test moves it forward instead of waiting out the
	// timeouts. It must not run behind time.Now (snfs mode's cache
	// manager stamps attributes with time.Now: they may only look older).
	Clock func() time.Time
}

// FS is one mounted export.
type FS struct {
	// Cfg is the configuration with New's defaults filled in: read-only
	// once New returns (a test sets MountPoint before any call).
	Cfg          Config
	rsize, wsize uint32
	log          *slog.Logger

	stats Stats

	// attrGen counts the replies of modifying calls that set a file's
	// attributes (Inode.ModGen): a non-modifying call's attributes are used
	// only when none came since it began (Inode.PostOpLocked).
	attrGen atomic.Uint64

	// Mu guards the maps below. It may be taken with an Inode's Mu held (a
	// log line naming a path, paths.go), so no Inode's Mu is taken under it.
	Mu      sync.Mutex
	Inodes  map[string]*Inode      // by file handle
	clients map[string]*client.NFS // by Cred.key
	silly   uint64
	// hidden counts, by directory handle, the silly-renamed names in that
	// directory whose removal (at the file's last release) has not ended;
	// it may dip below zero for a moment (Rmdir waits while it is above).
	hidden map[string]int
	root   *Inode
	// hiddenGone counts the hidden names removed (Rmdir: was one removed
	// while its RMDIR was on the wire?).
	hiddenGone atomic.Uint64
	// dirNames: names of directories learned for messages (paths.go).
	dirNames map[string]dirName
	// aliases: the objects reported with the number of the local inode
	// they were made as (inoalias.go), by handle, by file id, and by that
	// local inode.
	aliases   map[string]*inoAlias
	aliasByID map[uint64]*inoAlias
	aliasOf   map[*Inode]*inoAlias

	// LockTab is the lock table of the mode's server locks (snfs mode's,
	// or nfs mode's NLM: set as the mode starts); nil without (lockTable).
	LockTab *LockTable

	// notify drops the kernel's caches (SetNotifier, notify.go).
	notify atomic.Pointer[Notifier]

	ops Ops    // the mode's file operations (mode.go), set in New
	nl  *nlmFS // nfs mode with server locks (nlmlock.go); nil otherwise

	AfterRead func() // tests only, set before any read: runs between a READ's reply and the overlay (readOverlaid)
}

// Errors that are not an NFS status.
var (
	ErrNotSupported = errors.New("vfs: not supported by NFSv3")
	ErrInvalid      = errors.New("vfs: invalid argument")
)

// New makes an FS for an export in nfs mode: FSINFO gives the transfer
// sizes, GETATTR the root's attributes. snfs mode's is made by OpenSNFS.
func New(ctx context.Context, cfg Config) (*FS, error) { return NewFS(ctx, cfg, nil) }

// NewFS is New in the mode that mode makes (nil: nfs mode, the core's
// nfsOps): its Ops, made on the new FS before any inode exists (its hooks
// are asked about every inode) and started (Ops.start) once the root is
// known. snfs mode's is snfsMode (snfs.go).
func NewFS(ctx context.Context, cfg Config, mode func(*FS) Ops) (*FS, error) {
	if cfg.AcRegMin == 0 {
		cfg.AcRegMin = 3 * time.Second
	}
	if cfg.AcRegMax == 0 {
		cfg.AcRegMax = 60 * time.Second
	}
	if cfg.AcDirMin == 0 {
		cfg.AcDirMin = 30 * time.Second
	}
	if cfg.AcDirMax == 0 {
		cfg.AcDirMax = 60 * time.Second
	}
	if cfg.DirtyLimit == 0 {
		cfg.DirtyLimit = 8 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	fs := &FS{Cfg: cfg, log: cfg.Logger, rsize: 1 << 20, wsize: 1 << 20,
		Inodes: map[string]*Inode{}, clients: map[string]*client.NFS{}, dirNames: map[string]dirName{}}
	// The mode, before any inode exists (snfs mode's hooks find nothing
	// held until startSNFS has run).
	fs.ops = NFSOps{fs}
	if mode != nil {
		fs.ops = mode(fs)
	}
	root := Cred{}
	info, err := RPC(ctx, fs, func() (*nfs3.FsinfoRes, error) { return fs.Client(root).Fsinfo(ctx, cfg.Root) })
	if err != nil {
		return nil, fmt.Errorf("FSINFO: %w", err)
	}
	if info.RtMax != 0 && info.RtMax < fs.rsize {
		fs.rsize = info.RtMax
	}
	if info.WtMax != 0 && info.WtMax < fs.wsize {
		fs.wsize = info.WtMax
	}
	a, err := fs.GetattrFH(ctx, root, cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("GETATTR of the root: %w", err)
	}
	fs.root = fs.Inode(cfg.Root, a, fs.AttrStart())
	if err := fs.ops.Start(ctx); err != nil {
		return nil, err
	}
	return fs, nil
}

// Stats counts write-back events, and listings the kernel asked for again
// that the mount answered from the copy it kept (ListedDir).
type Stats struct {
	Writes, Commits, Rewrites atomic.Uint64 // Rewrites: verifier mismatches that sent data again
	ListingsKept              atomic.Uint64
}

// Stats returns the FS's counters.
func (fs *FS) Stats() *Stats { return &fs.stats }

// Root is the export's root directory.
func (fs *FS) Root() *Inode { return fs.root }

// WriteSize is the largest WRITE the server takes (FSINFO wtmax, at most 1 MiB).
func (fs *FS) WriteSize() uint32 { return fs.wsize }

// Client returns the connection with c's credentials.
func (fs *FS) Client(c Cred) *client.NFS {
	k := c.Key()
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	if n, ok := fs.clients[k]; ok {
		return n
	}
	n := fs.Cfg.NFS.As(c.UID, c.GID, c.Groups...)
	if len(fs.clients) > 1024 {
		clear(fs.clients)
	}
	fs.clients[k] = n
	return n
}

// RPC sends one call (send) as do does, until the answer is not
// NFS3ERR_JUKEBOX, and returns the last reply with its transport error or
// its status as an error (nil for NFS3_OK). The reply of a failed call is
// returned too (nil after a transport error): its wcc_data and post-op
// attributes still describe the file.
func RPC[R any](ctx context.Context, fs *FS, send func() (*R, error)) (*R, error) {
	var res *R
	err := fs.do(ctx, func() (nfs3.Status, error) {
		var err error
		if res, err = send(); err != nil {
			return 0, err
		}
		return statusOf(res), nil
	})
	return res, err
}

func statusOf(res any) nfs3.Status {
	switch r := res.(type) {
	case *nfs3.GetattrRes:
		return r.Status
	case *nfs3.WccRes:
		return r.Status
	case *nfs3.LookupRes:
		return r.Status
	case *nfs3.AccessRes:
		return r.Status
	case *nfs3.ReadlinkRes:
		return r.Status
	case *nfs3.ReadRes:
		return r.Status
	case *nfs3.WriteRes:
		return r.Status
	case *nfs3.CreateRes:
		return r.Status
	case *nfs3.RenameRes:
		return r.Status
	case *nfs3.LinkRes:
		return r.Status
	case *nfs3.ReaddirRes:
		return r.Status
	case *nfs3.FsstatRes:
		return r.Status
	case *nfs3.FsinfoRes:
		return r.Status
	case *nfs3.CommitRes:
		return r.Status
	case *snfs1.AppendRes:
		return r.Status
	case *snfs1.AllocateRes:
		return r.Status
	case *snfs1.GetXattrRes:
		return r.Status
	case *snfs1.ListXattrsRes:
		return r.Status
	case *snfs1.XattrChangeRes:
		return r.Status
	}
	panic(fmt.Sprintf("vfs: status of %T", res))
}

// Back-off for NFS3ERR_JUKEBOX: the server is busy with this file (a stalled
// flush, callbacks out); the call is sent again, later.
const (
	jukeboxFirst = 50 * time.Millisecond
	jukeboxMax   = 2 * time.Second
)

// do runs call until it answers something other than NFS3ERR_JUKEBOX, waiting
// longer each time, and returns its transport error or its status as an error
// (nil for NFS3_OK). The result the call stored stays valid for the caller,
// wcc_data of a failed call included.
func (fs *FS) do(ctx context.Context, call func() (nfs3.Status, error)) error {
	wait := jukeboxFirst
	for {
		st, err := call()
		if err != nil {
			return err
		}
		if st != nfs3.ErrJukebox {
			return st.Err()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if wait *= 2; wait > jukeboxMax {
			wait = jukeboxMax
		}
	}
}

func (fs *FS) GetattrFH(ctx context.Context, c Cred, fh nfs3.FH) (*nfs3.Fattr, error) {
	res, err := RPC(ctx, fs, func() (*nfs3.GetattrRes, error) { return fs.Client(c).Getattr(ctx, fh) })
	if err != nil {
		return nil, err
	}
	return &res.Attr, nil
}

// Now is the attribute cache's time: Config.Clock's, or time.Now.
func (fs *FS) Now() time.Time {
	if fs.Cfg.Clock != nil {
		return fs.Cfg.Clock()
	}
	return time.Now()
}

// AttrStart is taken before a non-modifying call whose reply carries
// attributes, for postOpLocked.
func (fs *FS) AttrStart() uint64 { return fs.attrGen.Load() }

// attrAlways as a start applies the attributes whatever came since (those of
// an object a CREATE, MKDIR, SYMLINK or MKNOD just made).
const attrAlways = ^uint64(0)

// Inode returns the Inode of fh, making it if new, and records attr, returned
// by a call that began at start (see postOpLocked).
func (fs *FS) Inode(fh nfs3.FH, a *nfs3.Fattr, start uint64) *Inode {
	k := string(fh)
	fs.Mu.Lock()
	i, ok := fs.Inodes[k]
	if !ok {
		i = &Inode{fs: fs, FH: append(nfs3.FH(nil), fh...), Type: a.Type, FileID: a.FileID, Gen: fhHash(fh)}
		fs.ops.InitInode(i)
		fs.newAliasLocked(i)
		fs.Inodes[k] = i
	}
	fs.Mu.Unlock()
	i.Mu.Lock()
	i.PostOpLocked(a, start, fs.Now())
	i.Mu.Unlock()
	return i
}

// Forget drops i from the table when nothing refers to it any more (the
// kernel forgot it, it is not open and holds no unwritten data).
//
// The bridge's FORGET of one node races with its LOOKUPs, which may hand
// the kernel another node of the same inode (a holder's node and the real
// inode's, inoalias.go; or a new node once the old one was forgotten): an
// inode dropped while such a node lives is one the kernel's opens use but
// that callbacks and invalidations, which find inodes by handle here, no
// longer reach: its dirty data would not be written back for another
// client's open. So a node recorded live keeps i, busy is decided under
// i.Mu held over the removal (an open counts itself under i.Mu), and the
// bridge puts an inode it gives the kernel back in the table (Known).
func (fs *FS) Forget(i *Inode) { fs.forget(i, nil) }

// NodeForgotten is Forget for the bridge's FORGET of node, a node of i:
// that node, whether or not it still looks live (go-fuse's Forgotten can
// stay false for a node whose name another node took), does not keep i;
// another node recorded since does.
func (fs *FS) NodeForgotten(i *Inode, node any) { fs.forget(i, node) }

func (fs *FS) forget(i *Inode, gone any) {
	if i == fs.root {
		return
	}
	i.Mu.Lock()
	// BusyLocked last: it forgets what the mode keeps of an inode it lets go.
	if keptLocked(i, gone) {
		i.Mu.Unlock()
		return
	}
	fs.Mu.Lock()
	var real *Inode
	if fs.Inodes[string(i.FH)] == i {
		delete(fs.Inodes, string(i.FH))
		real = fs.droppedLocked(i)
	}
	fs.Mu.Unlock()
	i.Mu.Unlock()
	if real != nil && !liveNode(real.Node()) {
		// The kernel knew the object only by i's node (inoalias.go).
		fs.Forget(real)
	}
}

// keptLocked reports whether i must stay in the table (i.Mu held): a live
// kernel node other than node, an open, unwritten data, or busy for the
// mode (BusyLocked last: it forgets what the mode keeps of an inode it
// lets go).
func keptLocked(i *Inode, node any) bool {
	return i.node != node && liveNode(i.node) || i.Opens > 0 || i.WState.Pending() || i.fs.ops.BusyLocked(i)
}

// Known: the bridge gave the kernel a node of i, or the kernel uses one
// (an open, a lock). A FORGET that raced with the node's lookup may have
// dropped i from the table (Forget): it goes back in, with its kept
// number. If another inode of its handle was made meanwhile (a lookup
// after the drop: go-fuse gave it i's node, whose operations come to i),
// i replaces it unless that one is in use (open, unwritten data, busy for
// the mode): callbacks, invalidations and write-back find inodes by
// handle, and must find the one the kernel's opens write through - with
// the other in the table, a callback found no dirty data there and
// answered at once while i's waited unwritten (a reader got the bytes
// before a rewrite whose close had returned: TestCrashCycles).
func (fs *FS) Known(i *Inode) {
	k := string(i.FH)
	fs.Mu.Lock()
	o, ok := fs.Inodes[k]
	if !ok {
		fs.Inodes[k] = i
		fs.knownAgainLocked(i)
	}
	fs.Mu.Unlock()
	if !ok || o == i {
		return
	}
	in := i.Node()
	o.Mu.Lock() // i.Mu before fs.Mu, as forget takes them
	defer o.Mu.Unlock()
	if keptLocked(o, in) {
		return // a kernel node of its own, or in use: the kernel may reach it
	}
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	if fs.Inodes[k] != o {
		return
	}
	fs.droppedLocked(o)
	fs.Inodes[k] = i
	fs.knownAgainLocked(i)
}

// Sync writes back and commits every file's dirty data (unmount, syncfs).
func (fs *FS) Sync(ctx context.Context) error { return fs.ops.SyncData(ctx) }

// SyncCore is Sync in nfs mode: every file's unwritten data is written back
// and committed (in snfs mode, after the cache directory's).
func (fs *FS) SyncCore(ctx context.Context) error {
	// i.Mu is not taken under fs.Mu: a log line naming a file's path takes
	// fs.Mu (paths.go) while its caller may hold i.Mu.
	fs.Mu.Lock()
	all := make([]*Inode, 0, len(fs.Inodes))
	for _, i := range fs.Inodes {
		all = append(all, i)
	}
	fs.Mu.Unlock()
	var dirty []*Inode
	for _, i := range all {
		i.Mu.Lock()
		if i.WState.Pending() {
			dirty = append(dirty, i)
		}
		i.Mu.Unlock()
	}
	var errs []error
	for _, i := range dirty {
		if err := i.Flush(ctx, true); err != nil {
			errs = append(errs, fmt.Errorf("%s (fileid %d): %w", fs.PathOf(i), i.FileID, err))
		}
	}
	return errors.Join(errs...)
}

// Close stops the write-back goroutine and closes the cache directory (snfs
// mode; nothing in nfs mode); a session OpenSNFS made is UNREGISTERed and
// ended. Call Sync first to write everything back.
func (fs *FS) Close() error { return fs.ops.Stop() }

// ReadSize returns the FS's rsize (set once, read without a lock).
func (fs *FS) ReadSize() uint32 { return fs.rsize }

// Logger returns the FS's log (set once, read without a lock).
func (fs *FS) Logger() *slog.Logger { return fs.log }
