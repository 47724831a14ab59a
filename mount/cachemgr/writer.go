package cachemgr

import (
	"snfs/mount/cachedir"
	"snfs/mount/vfs"
)

// noteWriterLocked records c as the writer of i's dirty data in cf: in memory
// (write-backs are sent as it) and in cf's cache entry (a restarted mount's
// reintegration sends them as it, writerOf). Called with i.Mu held (a cache
// file's lock is a leaf).
func noteWriterLocked(i *vfs.Inode, cf *cachedir.File, c vfs.Cred) {
	snOf(i).cred = c
	if cf != nil {
		cf.SetWriter(cachedir.Writer{UID: c.UID, GID: c.GID, Groups: c.Groups})
	}
}

// writerOf is the identity cf's dirty data was written as (root if the
// entry does not say: written by a mount before it was recorded).
func writerOf(cf *cachedir.File) vfs.Cred {
	w, ok := cf.Writer()
	if !ok {
		return vfs.Cred{}
	}
	return vfs.Cred{UID: w.UID, GID: w.GID, Groups: w.Groups}
}
