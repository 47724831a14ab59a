// Package drcstore keeps the replies of sunrpc's duplicate request cache in
// the server's state directory (a sunrpc.ReplyStore): with it, a call that a
// client retransmits across a restart of the server (the first attempt took
// effect, its reply was lost with the connection) gets the reply of the first
// attempt instead of being executed a second time, as a create answered
// EEXIST or a remove answered ENOENT although the first attempt succeeded.
// It keeps the intents handlers save before a change (sunrpc.Call.SaveIntent)
// the same way, as records marked Intent; a later reply of the call supersedes
// its intent when they are loaded.
//
// The replies are a log of segment files, replies/NNNNNNNNNNNNNNNN.log: each
// Save appends its replies (each a length, a CRC-32C and the record) to the
// current segment with one write and one fdatasync. A segment is filled with
// zeros and flushed when it is made, so that a save writes into allocated
// blocks and its fdatasync flushes the data only: one flush per save, where a
// B+tree (bbolt) commit flushes two or three times. Reading stops at the first
// record whose length or checksum is wrong (a save cut short by a crash,
// whose replies were therefore never sent) or at the zeros after the last
// record; a server that starts writes into a new segment, never after a
// possibly torn tail.
//
// It owns the log and its bounds: Load returns at most MaxCount replies (the
// newest), none older than MaxAge; whole segments are deleted once newer ones
// hold MaxCount replies or their newest reply is older than MaxAge, so the
// log holds at most MaxCount replies and one segment.
//
// It must not: decide which procedures are saved (the procedure tables do,
// sunrpc.Proc.Persist), know NFS, or flush anything but its own files.
package drcstore
