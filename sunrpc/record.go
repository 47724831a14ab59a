package sunrpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrRecordTooLarge is returned when a record's fragments add up to more than the limit.
var ErrRecordTooLarge = errors.New("sunrpc: record exceeds size limit")

const lastFragment = 1 << 31

// readRecord reads one record (RFC 5531 section 11: record marking) into buf[:0],
// joining fragments. It allocates only as bytes actually arrive, in chunks, so a
// peer that announces a large fragment and sends nothing costs little.
func readRecord(br *bufio.Reader, buf []byte, limit int) ([]byte, error) {
	buf = buf[:0]
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if len(buf) > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h &^ lastFragment)
		if len(buf)+n > limit {
			return buf, fmt.Errorf("%w: %d bytes announced, limit %d", ErrRecordTooLarge, len(buf)+n, limit)
		}
		for n > 0 {
			chunk := n
			if chunk > 256<<10 {
				chunk = 256 << 10
			}
			l := len(buf)
			if cap(buf)-l < chunk {
				nb := make([]byte, l, l+chunk+l/2)
				copy(nb, buf)
				buf = nb
			}
			buf = buf[:l+chunk]
			if _, err := io.ReadFull(br, buf[l:]); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return buf[:l], err
			}
			n -= chunk
		}
		if h&lastFragment != 0 {
			return buf, nil
		}
	}
}

// putMarker fills the 4-byte record mark for a single-fragment record of n bytes.
func putMarker(b []byte, n int) {
	binary.BigEndian.PutUint32(b, uint32(n)|lastFragment)
}
