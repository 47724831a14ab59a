// Package server is snfs's NFSv3 and MOUNT v3 service (with the snfs
// consistency protocol, NLM v4 and NSM v1, nlm.go and nsm.go): the procedure tables, one
// file per procedure (named after it, with its RFC 1813 section in the doc comment),
// the export table with its client rules and identity squashing (replaced as a whole
// by an exports reload, reload.go, so that a call sees one set or the other), the
// write verifier, and the glue that puts them on a sunrpc.Server.
//
// Flow of a call: sunrpc decodes the RPC header and hands the arguments to the
// procedure's row in the table (nfs.go), which decodes them into the nfs3 type
// (GARBAGE_ARGS if that fails) and runs the preamble the row declares: the handle
// the call is about is checked (format and MAC, once), the client's right to its
// export and, for procedures that modify, the export's writability are checked, and
// the object is opened with root credentials; a failure is answered with the
// procedure's result carrying only the status. The handler gets the resolved object
// (RENAME and LINK resolve their second handle themselves), does the file system
// work inside store.As with the caller's squashed identity, and fills in the nfs3
// result; the table releases the object and encodes the result. OS and store errors
// become nfsstat3 in exactly one place, statusOf in errors.go.
//
// Durability: UNSTABLE writes are left in the page cache; DATA_SYNC and FILE_SYNC
// writes are fdatasync'd/fsync'd before the reply; COMMIT fsyncs before replying.
// The write verifier is new on every start and is replaced whenever an fsync fails,
// since data a client thinks it may commit later may then be lost. On exports with
// the "sync" option (the default, as in exports(5)) namespace operations also flush
// the directories they change before replying.
//
// What it must not do: frame RPC messages (sunrpc's), touch file descriptors other
// than through store, or keep protocol state that belongs in a state layer.
package server
