// Package attrcache is the attribute cache behind READDIRPLUS and the fanotify(7)
// notifier that keeps it honest about changes made by other processes.
//
// Why. Listing a directory with attributes costs one fstatat(2) per entry, and on
// a large directory the kernel's path walk for each name is most of the call (as
// ganesha avoids with its metadata cache). The cache keeps, per inode, the handle
// and attributes of directory entries that were listed, so that listing the
// directory again costs only getdents(2).
//
// Keys and freshness (Cache). Entries are found by (device, inode number), which
// a listing has from getdents itself, so the name-to-inode binding is always the
// file system's current one; only the inode's attributes and handle come from the
// cache, and only while the directory it was listed in keeps the ctime it had
// then (any entry added, removed or renamed there changes it), so a name that
// another process removed and made again is never given the old object's handle,
// even before that process's events arrive. Entries are dropped:
//   - by the caller (package store), synchronously, for every object its own
//     operations may change (InvalidateIno, InvalidateKey);
//   - for changes made by anyone else on the server machine, from the events of
//     a Notifier, which the caller turns into InvalidateKey;
//   - after the TTL in any case, for the changes that no event reports (a write
//     through a shared mapping updates mtime silently; reads update atime). Get
//     reports a hit past half the TTL as aging, so that the caller can read it
//     again after its reply (Peek, Replace) and a directory listed at least once
//     per half TTL never falls back to one fstatat per entry, while no entry is
//     ever served older than the TTL;
//   - all at once when events were lost or the cache is full (InvalidateAll).
//
// A fill can race an invalidation: the entry is read, the object then changes
// and its invalidation runs before the entry is installed, finding nothing to
// drop. So every invalidation while fills are in flight bumps an epoch, and a
// fill installs its entry only if the epoch is the one it started under
// (BeginFill, EndFill; JuiceFS's generation rule: a racing fill cannot install
// stale data).
//
// Events (Notifier). One fanotify group, in FAN_REPORT_FID mode, with one
// file-system-wide mark per watched file system: every event names its object
// by the same kernel handle name_to_handle_at gives (for a change to a
// directory's entries, the directory's), so no descriptor is opened per event.
// It needs CAP_SYS_ADMIN and a file system that supports handles; without
// either, the caller simply does not use the cache. Each report says whether
// the change was this process's own (the event's pid): the server must not
// take its own writes for a local process's.
//
// The queue is drained on demand, not watched: every listing that may be served
// from the cache drains it first (Drain), so it sees every change completed
// before it began, by any process. The group's descriptor is never registered
// with the Go netpoller or waited on. Most events are the server's own changes
// (which it also drops synchronously), and a waiter on the queue is woken by each
// of them: with the descriptor in epoll, an event woke whichever thread sat in
// epoll_wait. (Draining on demand measured cheaper for the server and for other
// processes on the same file system; docs/measurements.md.) A goroutine owned by
// the Notifier drains it every notifyDrain as well, only to keep the kernel's
// queue short; an overflow drops the whole cache and costs nothing else. Close
// stops it.
//
// What it owns: the cache's maps, its clock reading, its hit and miss counts,
// and the fanotify group with its drain goroutine.
//
// What it must not do: read the file system (the caller reads entries and hands
// them in), open descriptors for events, know the store's handle format (it
// reports kernel handles as type and bytes; Entry.Key is whatever the caller
// gives InvalidateKey), or know NFS.
package attrcache
