// Package xdr implements the External Data Representation of RFC 4506 as a pair of
// cursor types: Reader decodes from a byte slice, Writer appends to one.
//
// What it owns: the wire encoding of integers, booleans, opaques and strings, and the
// bounds every decoder must respect. Reader never panics and never allocates from a
// length it has not checked against both a caller-given maximum and the bytes that are
// actually present; variable-length opaques are returned as sub-slices of the input
// (no copy), so a WRITE's data costs nothing to decode.
//
// What it must not do: know about RPC, NFS or any other protocol. Errors are sticky:
// after the first failure every further read returns zero values and Err reports the
// first error, so decoders are written as straight-line code with one check at the end.
package xdr
