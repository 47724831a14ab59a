package sunrpc

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestRawWriterFullSocket: a batch of more buffers than one writev takes, and
// more bytes than the socket holds, arrives whole and in order while the peer
// reads slowly (the writer parks on EAGAIN and resumes mid-buffer); empty
// buffers are skipped; a write after the peer closed reports an error.
func TestRawWriterFullSocket(t *testing.T) {
	c, srv := tcpPair(t)
	w := newBuffersWriter(srv, 0)
	if _, ok := w.(*rawWriter); !ok {
		t.Fatalf("a TCP connection got %T, want *rawWriter", w)
	}
	var want bytes.Buffer
	var bufs [][]byte
	for i := range 3000 {
		b := bytes.Repeat([]byte{byte(i)}, 1+i%4096)
		if i%7 == 0 {
			b = nil
		}
		want.Write(b)
		bufs = append(bufs, b)
	}
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // let the socket fill
		b, _ := io.ReadAll(io.LimitReader(c, int64(want.Len())))
		got <- b
	}()
	if err := w.writeBuffers(bufs); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("peer read %d bytes, differing from the %d written", len(b), want.Len())
	}
	c.Close()
	var err error
	for range 100 { // the first writes may still be accepted before the reset arrives
		if err = w.writeBuffers([][]byte{make([]byte, 64<<10)}); err != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err == nil {
		t.Fatal("writes to a closed peer kept succeeding")
	}
}
