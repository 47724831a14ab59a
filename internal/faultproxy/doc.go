// Package faultproxy is a fault-injecting TCP proxy for tests: it listens on
// 127.0.0.1, forwards every accepted connection to one target address, and on
// command delays, drops or stalls the bytes of one direction, resets every
// current connection, or partitions the two sides for a while.
//
// What it owns: its listener, the connections it accepted and dialled, and the
// goroutines that copy between them (two per direction of each connection plus
// the accept loop). Close stops all of them and returns when they are gone.
//
// The faults model what a network does:
//   - Delay(dir, d): every chunk of that direction reaches the other side d
//     after the proxy read it (order kept).
//   - Drop(dir): bytes read in that direction are discarded until Restore; the
//     stream the receiver sees has a hole, as after a middlebox that lost them.
//   - Stall(dir): bytes of that direction are held (read and queued, not
//     written) until Restore, then delivered in order.
//   - Reset: every current connection is closed with SO_LINGER 0 on both sides,
//     so both peers see an RST (ECONNRESET), not an orderly FIN.
//   - Partition(d): no byte moves either way for d (or until Heal when d <= 0).
//     A real partition loses packets and TCP retransmits them, so an
//     established connection that outlives the partition delivers every byte
//     once it heals: the proxy holds the bytes. New connections made during
//     the partition are accepted but not connected to the target until it
//     heals (a real client's SYN is retransmitted until it gets through).
//     Neither side sees an error from the proxy; their own timeouts are theirs.
//
// What it must not do: parse or know the protocol it carries, touch anything
// outside its own sockets, or be used by production code.
package faultproxy
