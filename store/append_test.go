package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
)

var localOnly = regexp.MustCompile(`^(\[local \d+\])+$`)

// TestAppendBeforeOffsets: Appends made at once, each with a before, while a
// local process appends to the file too: the last offset each before was
// given is where that Append's data went (the server's intents name it), each
// record is whole, and the befores ran together (some of them while another
// had not returned).
func TestAppendBeforeOffsets(t *testing.T) {
	s, e, exp := newTestStore(t, map[string]string{"log": ""})
	root, err := s.Resolve(e.Root)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Release()
	fh, _, err := s.Lookup(root, "log")
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Resolve(fh)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Release()
	if err := s.OpenIO(n); err != nil {
		t.Fatal(err)
	}
	const writers, recs = 6, 60
	var (
		mu         sync.Mutex
		inBefore   int
		overlapped bool
		wg         sync.WaitGroup
	)
	type placed struct {
		off, said int64
		rec       []byte
	}
	got := make([][]placed, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range recs {
				rec := fmt.Appendf(nil, "<%d:%d:%s>", w, k, bytes.Repeat([]byte{'a' + byte(w)}, (w*7+k)%40))
				var said int64 = -1
				off, m, err := s.Append(n, rec, func(at int64) error {
					mu.Lock()
					inBefore++
					overlapped = overlapped || inBefore > 1
					mu.Unlock()
					if k%5 == 0 {
						// a slow save, as the persister's commit
						for range 1000 {
							_ = fmt.Sprint(at)
						}
					}
					mu.Lock()
					inBefore--
					mu.Unlock()
					said = at
					return nil
				})
				if err != nil || m != len(rec) {
					t.Errorf("Append: %d of %d, %v", m, len(rec), err)
					return
				}
				got[w] = append(got[w], placed{off, said, rec})
			}
		}()
	}
	wg.Add(1)
	go func() { // a local process appending
		defer wg.Done()
		f, err := os.OpenFile(filepath.Join(exp, "log"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for k := range recs {
			f.Write(fmt.Appendf(nil, "[local %d]", k))
		}
	}()
	wg.Wait()
	data, err := os.ReadFile(filepath.Join(exp, "log"))
	if err != nil {
		t.Fatal(err)
	}
	for w := range got {
		for _, p := range got[w] {
			// Only a local write in the moment between the last size read
			// and the write may come between (what the server cannot tell).
			if p.said != p.off && (p.said > p.off || !localOnly.Match(data[p.said:p.off])) {
				t.Errorf("record %q went to %d, its before was last given %d", p.rec, p.off, p.said)
			}
			if end := p.off + int64(len(p.rec)); end > int64(len(data)) || !bytes.Equal(data[p.off:end], p.rec) {
				t.Fatalf("record %q is not whole at %d", p.rec, p.off)
			}
		}
	}
	if !overlapped {
		t.Error("no before ran while another had not returned: the befores of appends made at once do not run together")
	}
}
