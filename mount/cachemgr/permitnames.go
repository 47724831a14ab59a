package cachemgr

import (
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// Names the kernel keeps under a write-back permit (docs/mount.md "The name
// cache"). The kernel is told to keep no name of a cached directory (entry
// timeout 0), so that a promise's break needs no notification of names;
// every path walk then asks the mount for each component. A directory whose
// permit the mount holds is different: nobody else changes it before the
// permit is recalled (docs/protocol.md section 21.4), so its names are
// given to the kernel for as long as the lease holds (a recall the mount
// could not hear of is bounded by it, as the attributes are), and taken back
// all at once (vfs.FS.NotifyNames: the connection's epoch, which takes no
// directory's lock) before the permit ends:
//
//   - a recall: once it is being served (local changes from then on go
//     through the server), before CB_OK;
//   - a release (idle, too many, the directory removed): before
//     PERMIT_RELEASE;
//   - the server's restart, a refusal or any other drop of the permit;
//   - a rename out of such a directory into another: the kernel moves the
//     name with its lifetime (vfs.FS.Rename).
//
// Names of provisional objects (made here and not yet reintegrated) are
// kept too: the kernel's node of such a name is the provisional inode, whose
// number the real object keeps once the server made it, and whose requests
// the mount answers with the real inode (permitmake.go), so the name leads
// where a lookup would. When that does not hold (the object was not made,
// or the kernel knows the real one by another node), the names are dropped
// (provNamesStale) as the reintegration's results are taken in.
//
// A name given while the permit was held but sent to the kernel after the
// epoch's bump is still stale to the kernel: it reads the epoch before it
// sends the lookup. Without NotifyNames (a kernel older than Linux 6.16)
// no directory is kept.

// keep lets the kernel keep the names of dir, whose permit the mount now
// holds (called with permits.mu held, in the section that records the
// permit: a drop of it then comes after, and takes the names back; nc.mu
// is a leaf).
func (nc *nameCache) keep(dir nfs3.FH) {
	if !nc.sn.FS.CanNotifyNames() {
		return
	}
	nc.mu.Lock()
	if nc.kept == nil {
		nc.kept = map[string]bool{}
	}
	nc.kept[string(dir)] = true
	nc.mu.Unlock()
}

// takeBack stops giving the kernel names of dirs and, if it had any, drops
// every name it keeps (NotifyNames).
func (nc *nameCache) takeBack(dirs ...nfs3.FH) { nc.takeBackOf(false, dirs) }

// takeBackAll is takeBack of every directory.
func (nc *nameCache) takeBackAll() { nc.takeBackOf(true, nil) }

func (nc *nameCache) takeBackOf(all bool, dirs []nfs3.FH) {
	nc.mu.Lock()
	had := false
	if all {
		had = len(nc.kept) > 0
		nc.kept = nil
	}
	for _, d := range dirs {
		if nc.kept[string(d)] {
			had = true
			delete(nc.kept, string(d))
		}
	}
	if had {
		nc.provGiven = false
	}
	nc.mu.Unlock()
	if had {
		nc.dropKernelNames("a directory whose permit ends")
	}
}

// dropKernelNames drops every name the kernel keeps (NotifyNames); whose
// says which names had to go, for the warning when they could not.
func (nc *nameCache) dropKernelNames(whose string) {
	if !nc.sn.FS.NotifyNames() {
		nc.sn.FS.Logger().Warn("the kernel's names could not be dropped", "of", whose)
	}
}

// NamesKept is vfs.Ops.NamesKept in snfs mode.
func (sn *snfsFS) NamesKept(dir *vfs.Inode) bool {
	nc := sn.names
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return nc.kept[string(dir.FH)]
}

// keptTTLOfLocked is how long the kernel may keep the name of the object
// of handle fh (nil: any) in dir, a cached directory: the lease's rest if
// dir is kept, else 0 (nc.mu held).
func (nc *nameCache) keptTTLOfLocked(dir, fh nfs3.FH) time.Duration {
	if !nc.kept[string(dir)] {
		return 0
	}
	ttl := min(nc.leaseLeftLocked(time.Now()), nc.sn.cfg.CacheTTL)
	if ttl > 0 && isProvFH(fh) {
		nc.provGiven = true
	}
	return ttl
}

// keptTTLOf is keptTTLOfLocked for a caller without nc.mu, 0 if dir is
// not cached.
func (nc *nameCache) keptTTLOf(dir, fh nfs3.FH) time.Duration {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if _, ok := nc.dirs[string(dir)]; !ok {
		return 0
	}
	return nc.keptTTLOfLocked(dir, fh)
}

// provNamesStale: a name of a provisional object the kernel keeps may lead
// where a lookup would not (permitmake.go settled): if any was given since
// the kernel's names were last dropped, they are dropped.
func (nc *nameCache) provNamesStale() {
	nc.mu.Lock()
	given := nc.provGiven
	nc.provGiven = false
	nc.mu.Unlock()
	if given {
		nc.dropKernelNames("objects made under a permit")
	}
}
