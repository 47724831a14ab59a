// Package cachedir is the persistent client cache of snfs mount (Coda's disk
// cache, validated as AFS validates it): a directory on the local disk that
// holds, per file handle, a sparse data file at the server file's offsets and
// a record in a bbolt index (dir/index.db): the server version the clean data
// was cached at, the size, which byte ranges are present and which of them are
// dirty (written locally, not yet written back), a pending size change, the
// last use, a fill generation, and for reintegration (the mount's, after a
// crash or a fencing) the server's change attributes last seen in sync with
// the data (Base) and the file's parent handle and name (Origin).
//
// It owns: the data files and the index; the range bookkeeping; durability
// (Sync returns only after the file's data is fdatasync'd and its record
// committed, or, for a small dirty file, after one index commit that holds the
// record and a copy of the data, which Open writes back into the data file; so
// what close() returned survives a crash of the mount, unlike Sprite's memory
// cache, and DirtyFiles lists what a restarted mount must write back;
// SyncFiles does it for several files with one index commit, which is how the
// mount records a round of write-backs as clean); the fill generation (JuiceFS's rule: a fill that started before an
// invalidation is refused, so stale data is never installed); and eviction of
// the least recently used clean files while the cache exceeds its size limit.
// Dirty files are never evicted; Remove drops a file's dirty data without a
// write-back, which is what makes a temp file deleted in time free.
// Pinning (passthrough.go): a data file the kernel reads or writes directly
// (FUSE passthrough) is never evicted or hole-punched, and writes made to it
// behind the cache's back are taken in by NoteExternal. Write-behind: the
// disk writes of what it writes are started every few MiB (File.WriteAt), and
// those of data files written behind its back (passthrough writers) every few
// milliseconds by a WriteBehind (writebehind.go), so that a close's
// fdatasync has little left to wait for.
//
// It must not: know FUSE, NFS or RPC (the mount reads what is missing, writes
// back what Dirty returns and reports the result with MarkClean), decide when
// to write back (the mount's delay policy does), or start goroutines other
// than a WriteBehind's (its owner stops it with Close): every call does its
// work in the caller, eviction included, and concurrent Syncs share index
// commits (groupCommit) rather than waiting on a timer.
//
// Concurrency: a File's RWMutex guards its state and is held across its data
// file I/O and, for Sync and retractions, the index commit; reads of one file
// share it. Cache.mu guards only the handle map and is taken after a File's
// lock, never before. The eviction pass and Flush (and Close) are the only
// holders of several File locks at once and are serialized by Cache.evicting.
package cachedir
