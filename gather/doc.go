// Package gather implements server write gathering for stable NFS writes, after
// Juszczak, "Improving the Write Performance of an NFS Server" (USENIX 1994), section
// 6.8, with the paper's future-work suggestion: learn from each file's recent traffic
// whether waiting can pay off, so that a lone writer never waits.
//
// A stable WRITE (or a COMMIT) calls Begin as soon as it is received, writes its
// data to the file system without syncing, then calls Wait. Wait puts it on the
// file's queue. If a flush is running or another request is already leading, it
// sleeps until a flush that started after it joined has finished. Otherwise it leads:
// it waits, only if that can gather more (requests already received for this file
// that have not joined yet, or - adaptively - the next request, when this file's
// recent requests overlapped and arrived closer together than the bound, and the
// requests it waited for recently mostly came within a flush), then takes
// the whole queue as one batch, makes one flush call that covers all of it, and
// releases every member, first in first out, with the flush's error and result. The
// next queued request, if any, leads the next batch.
//
// Guarantees: no member of a batch is released before the flush covering it has
// returned; a flush covers only requests that finished writing before it started; a
// failed flush fails every member of its batch. The package makes no I/O of its own
// (the flush is a function the caller passes) and reads time only through Clock.
//
// What it must not do: know about NFS, file descriptors or replies.
package gather
