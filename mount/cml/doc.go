// Package cml is the client modification log of an snfs-mode mount (Coda's
// CML; docs/protocol.md section 21, docs/mount.md "The client modification
// log"): the directory changes a client makes locally under write-back
// permits, kept durably in the cache directory (CACHEDIR/cml), optimised,
// and reintegrated into the server in batches with REINTEGRATE.
//
// It owns:
//   - the on-disk log (format.go, log.go): segment files of frames (length,
//     CRC-32C, a kind and its fields in XDR; a logged record is snfs1's
//     cmlrec1 itself, so what is logged and what is sent are one vocabulary),
//     preallocated with zeros so that an append's fdatasync flushes data
//     only; replay at Open, which cuts a torn or damaged tail and never
//     writes after one (a new segment each Open); compaction into a segment
//     that begins with a checkpoint once a plan is all acknowledged and the
//     log spans more than one segment or half of the one it writes.
//   - LSNs and provisional ids (append.go): Append gives each record the
//     next LSN, and a record that makes an object its LSN as provisional
//     id. A new log's first LSN is the clock's microseconds, so a log made
//     again never starts below what the server last applied for the name.
//   - durability: Append returns once its record is flushed, the flush shared
//     by every Append that wrote meanwhile (a group commit without timer or
//     goroutine); AppendLazy returns once the record is written (a killed
//     mount loses nothing, a crashed machine may lose it) and Sync flushes.
//   - the bases of the names the records change (base.go): what each held
//     on the server before the oldest record left that changes it, given
//     with the record and written in its frame, moved to what each
//     acknowledged batch left, kept by compaction: what the mount checks
//     before it sends records whose permit was lost.
//   - the optimiser (optimize.go, pure): Optimize's two rules, which never
//     reorder and never need the server's tree.
//   - reintegration (reintegrate.go): the optimised plan written durably
//     before any of it is sent, batches of at most snfs1.ReintegrateMax
//     records under the permits their directories need, each reply checked
//     and recorded (the acknowledged LSN and the real handles of the
//     provisional ids) before the acknowledged records are dropped; a plan
//     interrupted by an error or a crash is sent again as it was, and the
//     server answers what it applied before without applying it again.
//     Stores says whether a CML_STORE of an object is still to be sent (not
//     acknowledged, raw or in the plan): the mount writes that object's data
//     by WRITE only once none is, so that no STORE is applied after it.
//   - what `snfs status` shows of it: Stats (length, bytes, age of the
//     oldest record).
//
// It must not: import mount/vfs, mount/fusefs or go-fuse (the mount calls
// it); decide when to reintegrate (the mount's policy: age, length, a
// directory's fsync, unmount, a recall), ask for permits or answer
// callbacks (the mount holds the session and its permits; the log names in
// a batch only the permits it is given and those MKDIR records obtained);
// make conflict copies (a refused record is returned as a ConflictError;
// the caller keeps what it did and calls Skip); start goroutines; or know
// the cache directory's data files.
//
// Concurrency: Append, AppendLazy, Sync and the accessors may be called from
// any goroutine and only take mu, never across a flush (waitFlushed releases
// it). Reintegrate and Skip are serialized by reint, held across their RPCs
// and taken before mu; appends go on while a reintegration waits for the
// server.
package cml
