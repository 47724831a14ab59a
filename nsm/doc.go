// Package nsm holds the Network Status Monitor protocol, version 1 (program
// 100024, SM): how the lock managers of NLM (package nlm4) learn that a peer
// restarted, so that a server drops the locks of a client that rebooted and a
// client reclaims its locks from a server that did. It is the Open Group's
// XNFS, Version 3W, chapter 11, "Network Status Monitor Protocol"
// (pubs.opengroup.org/onlinepubs/9629799/chap11.htm), whose XDR is
// rpcsvc/sm_inter.x (glibc, FreeBSD, nfs-utils).
//
// It owns the constants and the XDR types of the six procedures (SM_STAT,
// SM_MON, SM_UNMON, SM_UNMON_ALL, SM_SIMU_CRASH, SM_NOTIFY), one per file, and
// of the call a status monitor makes back to the lock manager that asked it to
// monitor a host (Status, the "SM_NOTIFY callback", in notify.go). Decoders
// are bounded (host names at most MaxStrLen bytes) and fuzzed.
//
// The one thing it does with a file is the host's own state number (state.go):
// odd while the host is up, advanced by two at each start and kept on disk, so
// that a peer can tell one incarnation of this host from the next. Apart from
// that it must not touch files or sockets, nor keep the list of monitored hosts.
package nsm
