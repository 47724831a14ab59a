// Package sunrpc implements ONC RPC version 2 (RFC 5531) over TCP with record marking
// and over UDP: connections that carry calls in both directions, a server that
// dispatches calls to registered programs through a declarative procedure table, a
// duplicate request cache, and a client that keeps many calls in flight on one
// connection and serves the calls its server sends back.
//
// What it owns: message framing and the call/reply headers, AUTH_NONE and AUTH_SYS
// credentials, RPC-level errors (PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL,
// GARBAGE_ARGS, SYSTEM_ERR, AUTH_ERROR), the reply cache, bounded record sizes,
// per-connection back-pressure, and the goroutines that serve connections.
//
// What it must not do: know anything about NFS or MOUNT. A program is a table of Proc
// values; the only things the transport learns from a procedure are its name (for
// metrics), whether its replies must be cached (Proc.Cache) and outlive a restart
// (Proc.Persist: saved through the DRC's ReplyStore before they are sent, group
// committed, loaded back at the next start; a handler may save an intent
// before its change, Call.SaveIntent, which the program resolves at the next
// start, DRC.Intents, for the retransmission to find in Call.Intent), whether
// a given call
// is quick enough to run on the reader (Proc.Inline, a hint computed by the program
// from the raw arguments), and how large its reply may be (Proc.MaxReply).
//
// # Two directions on one connection
//
// A Conn is one connection, whichever side dialled. It owns the xid counter of the
// calls it sends, the table of those waiting for replies, and one writer that its
// replies and its calls share. Its reader routes every record by message type
// before anything that can block: a REPLY goes to its waiting caller, a CALL to
// the program table. A server handler finds its caller's connection in Call.Conn
// and may call the client back on it later (Conn.Call), for a program the client
// serves (WithPrograms); Conn.Done and Conn.OnClose tell a state layer when to
// forget it, and the handler's context ends with the connection. A Client runs a
// connect hook (WithOnConnect) on every new connection before other calls use it,
// so after a reconnect the server learns the client's new connection. Because the
// two directions number their xids independently, the same xid may be in flight
// both ways at once; the message type tells them apart.
//
// # Back-pressure: one client cannot stall the others
//
// Calls never wait for a worker on the reader: a call that is not inline waits in
// its own goroutine, first for a slot of its connection's share
// (Server.ConnInFlight), then for one of the server's (Server.MaxInFlight), and
// gives the slot back once its reply is built, before the reply is written. Every
// call read holds part of its connection's budget (Server.ConnMemory: its request
// buffer and room for its reply, by capacity) until the reply is written, and the
// reader stops reading while the budget is spent: a peer that never reads its
// replies stops being read and holds no worker. A reply write that makes no
// progress for Server.ReplyTimeout drops the connection, and calls of a connection
// whose peer went are dropped before they start. (The budget bounds how many calls
// a client may pipeline before the server stops reading; it is far above what a
// client with a callback outstanding needs, so the replies to the server's calls
// back are always read.)
//
// # Concurrency and system calls
//
// Every accepted connection has one reader goroutine owned by the Server. A call
// whose Proc.Inline says it never waits runs on that reader when nothing else is
// buffered (no goroutine handoff and no thread wakeup per call; see
// docs/measurements.md). Replies go out in whatever order calls finish; replies
// that become ready while one is being written are sent together by the goroutine
// already writing, in one writev (combiner, which carries calls too). Socket reads
// and writes are raw, non-blocking system calls that park on the netpoller on
// EAGAIN (pollread.go, rawwrite.go, package rawsys): the runtime's syscall path
// would wake its sysmon thread on the first call after every idle gap. Shutdown
// stops the listeners, cancels handlers' contexts, waits for every call already
// read, then closes connections.
//
// Between calls, a connection whose calls arrive close together polls its socket
// for up to Server.SpinPoll instead of sleeping (pollread.go): on a VM, the thread
// wakeups of an idle Go server cost a one-call-at-a-time client more than the calls.
// Polling is adaptive (one empty poll makes a connection cold) and bounded (at most
// GOMAXPROCS-1 connections poll at once, so a poller never holds the last P).
package sunrpc
