// Package vfs is the client logic of `snfs mount`: what a kernel NFS client
// does between the system calls and the wire, without any FUSE types (package
// fusefs is the bridge to go-fuse; it translates, this package decides).
//
// It implements both modes of the mount: plain NFSv3 (--mode=nfs, the core
// below, which snfs mode builds on) and the snfs consistency protocol's cache
// manager (--mode=snfs, further down). Package mount puts a mount together
// (connections, MNT, this package's FS, fusefs); package cachedir keeps snfs
// mode's cache directory (write-behind of passthrough writers included).
// The operations whose meaning depends on the mode are two implementations
// of Ops (mode.go), the core's and the cache manager's, one chosen in New;
// fusefs takes it at Mount, and the core asks it for what snfs mode does
// inside the core's own operations (Ops.beforeThrough, Ops.removed; its
// cache of directories: Ops.LookupName, ListNames, EntryTTLLocked and
// DirChanged, which the core calls first or after each change of a
// directory, falling back to LookupCore and ReadDirCore). What
// only snfs mode has (passthrough, lock pids, dirty bytes, its counters) is
// SNFSMode (mode.go), the cache manager itself: fusefs and package mount
// take it at mount time (FS.SNFS, nil in nfs mode) and call it only if they
// have it, so no entry point asks the mode on each call.
//
// The plain NFSv3 client core: this package (vfs.go, inode.go; ops.go:
// GETATTR, LOOKUP, READLINK, SETATTR, ACCESS, FSSTAT; create.go: CREATE,
// MKDIR, SYMLINK, MKNOD, LINK; remove.go: REMOVE, RMDIR, RENAME and silly
// rename; readdir.go: READDIR, READDIRPLUS and the kernel's listing cache;
// file.go, write.go, extents.go, paths.go, readonly.go, setid.go, notify.go,
// nlm*.go, locktab.go, lockreclaim.go, locklost.go, append.go, mode.go;
// inoalias.go: the inode number an object made locally keeps once the
// server made it). It knows snfs mode only through the hooks it calls: Ops
// (mode.go, the mode's operations and what the core asks of the mode inside
// its own), and the extension slots Inode.Ext and File.Ext, which it never
// reads. snfs mode's
// cache manager is package mount/cachemgr, which imports this one (NewFS
// with its mode factory, the exported fields and methods, each saying which
// lock guards it); this package must not import it.
//
// It owns: every decision between a system call and the wire (what to send,
// what to cache and for how long, when to write back, what a callback
// invalidates), the goroutines named below (each stopped by Close).
//
// It must not: import go-fuse (fusefs translates), frame RPC (package
// client does), touch the cache directory's files other than
// through cachedir, or map errors to errno (fusefs does, in one place).
//
// The plain NFSv3 core keeps close-to-open consistency as the Linux NFS
// client does it:
//
//   - Attribute cache per file handle with adaptive timeouts (acregmin 3 s,
//     acregmax 60 s, acdirmin 30 s, acdirmax 60 s): a timeout starts at the
//     minimum, doubles each time the attributes are revalidated unchanged and
//     drops back to the minimum when they change. The remaining lifetime of an
//     entry is what the kernel is told to cache the attributes and entries for.
//   - Open revalidates (an ACCESS call, whose post-op attributes serve as the
//     GETATTR): the kernel's cached pages are kept (FOPEN_KEEP_CACHE) only when
//     the file's change attributes (size, mtime, ctime) are those the cached
//     data was read or written at; otherwise the kernel drops them.
//   - Writes are buffered per file and sent on close (flush), fsync, or when
//     more than a few MiB are dirty: UNSTABLE WRITEs, many in flight, then a
//     COMMIT whose verifier is compared with the WRITEs'; on a mismatch (the
//     server restarted and may have lost them) everything uncommitted is
//     written again (RFC 1813 section 3.3.7). Data stays in memory until
//     committed, so a READ of a region not yet written back sees it.
//   - Weak cache consistency: when a WRITE, SETATTR or COMMIT reply's pre-op
//     attributes equal the change attributes the cached data belongs to, the
//     post-op attributes become that version (replies may arrive in any order:
//     (pre, post) pairs are chained), so the client's own writes do not
//     invalidate its own cached data at the next open.
//   - NFS3ERR_JUKEBOX is retried with back-off until the context ends.
//   - A context that ends (the FUSE request was interrupted) leaves nothing
//     half applied in Read and Write: a READ installs nothing, a flush
//     cancelled keeps its data dirty, a write waiting for a flush takes none
//     of its data (file.go, buffered), a write-through takes its data and
//     then finishes without the cancellation (snfsio.go). Calls that change
//     the server's state get a context that is not cancelled halfway
//     (mount/fusefs, ctx.go).
//   - Listings use READDIRPLUS (READDIR if the server does not support it),
//     and their attributes and handles answer the kernel's lookups.
//   - O_APPEND writes are placed by the mount (append.go): at the size last
//     learned from the server (revalidated when expired), as the Linux NFS
//     client appends; the kernel would send them at its own cached size.
//   - Removing or renaming over a file that is still open renames it to a
//     hidden ".snfs…" name instead ("silly rename", as NFS clients do), so the
//     open file stays readable; the name is removed at the last close.
//   - A read-only mount (Config.ReadOnly, readonly.go) refuses every change
//     with NFS3ERR_ROFS before sending anything; in snfs mode it opens files
//     for reading only and refuses a cache directory with data to write back.
//   - Locks (Config.NLM, nlmlock.go): fcntl and flock locks through the
//     server's NLM v4, as the Linux NFS client's lockd: TEST, LOCK, UNLOCK,
//     CANCEL, FREE_ALL at start; a blocked LOCK granted by the server's
//     GRANTED (or GRANTED_MSG) to this mount's callback service (nlmcb.go),
//     or by sending it again every poll interval; write-back before and cache
//     invalidation after each grant, as in snfs mode. After a server restart,
//     seen as a new NSM state number (SM_STAT, nlmreclaim.go, its goroutine
//     stopped by Close), the locks held (lockreclaim.go keeps each owner's
//     ranges) are reclaimed; those refused are lost (EIO, locklost.go).
//
// Every call is made with the AUTH_SYS identity of the process that caused it
// (writes flushed later: of the last writer), so the server decides
// permissions and owners, as with a kernel NFS mount.
//
// snfs mode (package mount/cachemgr, set up with cachemgr.OpenSNFS): the consistency
// protocol's OPEN/CLOSE per open, callbacks turned into write-backs and kernel
// invalidations (Notifier), data of cached files in the cache directory
// (package cachedir) with delayed write-back, cancelled when the file is
// deleted or truncated to zero first; FUSE passthrough of cached files
// (passthrough.go, which writes down what passes through and why), writers
// included, watched so that this client can stay the pinned holder of a file
// another client opens (pinned.go, with package hsm); appends at the cache
// file's end while cached, placed by the server (SNFS APPEND) while
// write-shared (append.go); fallocate through the server (SNFS ALLOCATE,
// allocate.go; nfs mode answers EOPNOTSUPP); recovery:
// the reclaim after a server restart (callback.go) and the reintegration of
// dirty data the server has no record of, with conflict copies when another
// client changed the file meanwhile (reintegrate.go); extended attributes of
// the user namespace through the protocol's GETXATTR and its kin, cached with
// a cached file's data (xattr.go).
//
// Not done: extended attributes in nfs mode (NFSv3 has none); without
// Config.NLM, nfs mode's locks are the kernel's, local to this mount.
package vfs
