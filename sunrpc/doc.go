// Package sunrpc implements ONC RPC version 2 (RFC 5531) over TCP with record marking
// and over UDP: a server that dispatches calls to registered programs through a
// declarative procedure table, a duplicate request cache, and a client that keeps many
// calls in flight on one connection.
//
// What it owns: message framing and the call/reply headers, AUTH_NONE and AUTH_SYS
// credentials, RPC-level errors (PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL,
// GARBAGE_ARGS, SYSTEM_ERR, AUTH_ERROR), the reply cache, bounded record sizes and the
// goroutines that serve connections.
//
// What it must not do: know anything about NFS or MOUNT. A program is a table of Proc
// values; the only things the transport learns from a procedure are its name (for
// metrics), whether its replies must be cached (Proc.Cache), and whether a given call
// is quick enough to run on the reader (Proc.Inline, a hint computed by the program
// from the raw arguments).
//
// Concurrency: every accepted connection has one reader goroutine owned by the Server.
// A call whose Proc.Inline says it never waits runs on that reader when nothing else
// is buffered (no goroutine handoff and no thread wakeup per call; see
// docs/measurements.md); every other call runs in its own
// goroutine, bounded by Server.MaxInFlight. Replies go out in whatever order calls
// finish; replies that become ready while one is being written are sent together by
// the goroutine already writing, in one writev (combiner, which the client uses for
// calls too). Socket reads and writes are raw, non-blocking system calls that park
// on the netpoller on EAGAIN (pollread.go, rawwrite.go, package rawsys): the
// runtime's syscall path would wake its sysmon thread on the first call after
// every idle gap. Shutdown stops the listeners, waits for every in-flight call,
// then closes connections.
//
// Between calls, a connection whose calls arrive close together polls its socket
// for up to Server.SpinPoll instead of sleeping (pollread.go): on a VM, the thread
// wakeups of an idle Go server cost a one-call-at-a-time client more than the calls.
// Polling is adaptive (one empty poll makes a connection cold) and bounded (at most
// GOMAXPROCS-1 connections poll at once, so a poller never holds the last P).
package sunrpc
