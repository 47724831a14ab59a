// Package fsx is a random-operation file tester in the style of fsx (Avadis
// Tevanian's tester, as kept in xfstests' ltp/fsx.c): it applies a long,
// seed-determined sequence of operations to one file on the file system under
// test - writes (also past the end, leaving holes), truncates that shrink and
// extend, reads, reads and writes through a shared mapping, fsync, close and
// reopen, and optionally hole punching and zeroing with fallocate and appends
// through a second descriptor opened O_APPEND (Weights.Append; they must land
// at the model's end of file, wherever that descriptor's offset is) - and applies
// the same operations to an in-memory model of the file's bytes. Every read, the
// file's size after every operation that can change it, and the whole file at
// the end are checked against the model.
//
// A mismatch stops the run with an *Error that names the seed, the operation
// number, the offset of the first differing byte, a hex window of expected and
// actual bytes, the operation that last wrote the expected byte, the last
// operations (Config.LogLen, 20 by default) and a command line that replays the
// run (TestFsxReplay in this package's tests, with -fsx.seed and friends).
//
// The sequence depends only on the Config (seed, weights, bounds), never on what
// the file system returns, so Plan gives it without touching a file and a failing
// seed replays exactly. The generator is math/rand/v2's PCG.
//
// Other views of the file: Config.ExternalCheck is called every CheckEvery
// operations and at the end, after an fsync (or a close, see Prep), with the
// model's bytes; CompareFile builds one that reads the file through another path
// (the server's export directory, a second mount), and Compare compares bytes read
// any other way (a second client's READs).
//
// Run is bounded by its context: a deadline stops it between operations with an
// error that says how far it got and wraps ctx.Err().
//
// What it must not do: know about NFS, mounts or servers (those are the caller's
// ExternalCheck), or run more than one goroutine.
package fsx
