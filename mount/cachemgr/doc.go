// Package cachemgr is snfs mode's cache manager (`snfs mount --mode=snfs`):
// the consistency protocol's client (docs/protocol.md) on top of the plain
// NFSv3 client core, package vfs, which it imports and embeds (snfsFS embeds
// *vfs.FS and is the core's vfs.Ops for snfs mode, made by the core's NewFS
// through the mode factory snfsMode; OpenSNFS sets up a mount in snfs mode).
//
// It owns: the session (OPEN/CLOSE per open, CREATE_OPEN per create:
// createopen.go, callbacks, CB_GRANTED), the
// cache directory's use (package cachedir) with delayed write-back and
// delayed close (keptlease.go: a kept open taken over only under the lease,
// else given back and OPENed), passthrough with its pinned-holder watch (package hsm),
// recovery after a server restart (reclaim, reintegration, conflicts), lock
// delegation and the lock lease (snfsLocks, which adds them to the core's
// lock table and shares its mutex), write-back permits and the modification
// log (permits.go, permitlocal.go; permitlost.go: a permit lost with
// records in the log asked again and their names checked against their
// bases; permitreclaim.go: after a server restart, the permits of the
// log's directories reclaimed (RECLAIM_PERMIT) and the files made locally
// whose data is not written reclaimed dirty; permitmake.go, permitcreate.go and
// permitsymlink.go: the objects made locally, provisional until
// reintegrated; permitdata.go: the data of regular files made so, kept in
// offlinedata.go's local store and written after the reintegration, with
// --permit-data=on only (the command's default); permitstore.go:
// a small closed file's data sent in the reintegration (CML_STORE), and
// permitreadback.go: such a file opened by that reintegration, its bytes
// kept as its clean cached data; permitdurable.go: what a close, an fsync,
// a directory's fsync, Sync and unmount promise of that data, failed
// pushes retried, and an open of such a file served once its data is on
// the server;
// permitopen.go: the opens of files made without it given by the
// reintegration;
// permitlink.go: LINK; permitsetattr.go: SETATTR of a provisional object or
// of a directory under its permit; permittimes.go: the attributes those
// changes change besides the entries (a directory's times and link count,
// a multiply linked object's link count); permitrelease.go: permits given back
// before unmount, a recall whose reintegration failed), disconnected
// operation (disconnected.go, disconnectednames.go; offline.go,
// offlinedata.go, offlinereint.go, offlinebase.go, offlinesetattr.go:
// namespace changes and SETATTRs made offline through the log), extended attributes, ALLOCATE, its
// counters and what `snfs status` shows of it (status.go); its per-inode state lives in the core's slot Inode.Ext (snOf)
// and its per-open state in File.Ext (fsnOf, snfsOpened). SNFS(fs) hands
// out its SNFSMode (nil in nfs mode) to the bridge (fusefs) and package mount.
//
// It must not: import go-fuse (fusefs translates), frame RPC (package client
// does), reach into the core other than through vfs's exported API (the
// names exported for it say which lock guards them), or map errors to errno.
// The core must not import it.
package cachemgr
