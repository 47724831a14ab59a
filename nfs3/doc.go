// Package nfs3 holds the NFS version 3 protocol of RFC 1813: constants, the XDR types
// of section 2.5 and 2.6, and the arguments and results of the 22 procedures of
// section 3.3, each procedure in its own file, named as in the RFC in Go case
// (nfs_fh3 is FH, WRITE3args is WriteArgs).
//
// Every type encodes and decodes itself, in both directions, so the server and the
// client share one codec. Decoders are bounded: handles are at most FHSize bytes,
// names and paths at most MaxPath bytes, directory listings at most MaxEntries long,
// and a WRITE's data is a sub-slice of the request (no copy). Every result is a
// Result, so a server can answer any procedure's failure without knowing its type.
// PeekFH and PeekWrite read the leading fields of arguments not yet decoded (for
// scheduling hints) with the decoders' own code, and are fuzzed against them.
//
// What it must not do: touch a file system or a socket. Mapping OS errors to Status
// belongs to the server, in exactly one place.
package nfs3
