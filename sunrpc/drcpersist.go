package sunrpc

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"
)

// SavedReply is one reply of the duplicate request cache as a ReplyStore keeps
// it.
type SavedReply struct {
	Key   DRCKey
	At    time.Time // when the reply was made
	Reply []byte    // the RPC reply message, without its record mark
	// Intent: Reply is not a reply but what the handler saved before its
	// call changed anything (Call.SaveIntent), for a retransmission after a
	// restart that finds no reply after it.
	Intent bool
}

// ReplyStore keeps the replies of the procedures marked Proc.Persist across
// restarts of the server (DRC.Persist). The DRC calls Save from one goroutine at
// a time, and Load before that goroutine starts.
type ReplyStore interface {
	// Load calls f with every saved reply, oldest first.
	Load(f func(SavedReply)) error
	// Save makes rs durable before it returns, and forgets the oldest replies
	// beyond the store's own bounds (its count and age). rs holds every reply
	// made while the previous Save ran: one commit for all of them.
	Save(rs []SavedReply) error
}

// errDRCClosed: a reply made after Close is not saved.
var errDRCClosed = errors.New("sunrpc: reply cache closed")

// Persist loads the replies saved in st into the cache, then saves in st the
// reply of every call to a procedure marked Proc.Persist before the reply is
// sent (or, for a call marked Call.SaveLater, within laterDelay). Replies
// older than maxAge are neither loaded nor replayed (0: no bound). Persist
// starts the goroutine that writes to st; Close stops it. Call it before
// serving, at most once.
func (d *DRC) Persist(st ReplyStore, maxAge time.Duration) error {
	if d.persist != nil {
		return errors.New("sunrpc: DRC.Persist called twice")
	}
	now := d.now()
	d.mu.Lock()
	d.maxAge = maxAge
	err := st.Load(func(r SavedReply) {
		if maxAge > 0 && now.Sub(r.At) > maxAge {
			return
		}
		if old, ok := d.entries[r.Key]; ok {
			// The same call answered again later, or answered after its
			// intent: the newer record counts.
			d.remove(old)
		}
		e := &drcEntry{key: r.Key, done: true, at: r.At, reply: r.Reply}
		if r.Intent {
			e.reply, e.intent = nil, r.Reply
		}
		d.entries[r.Key] = e
		d.add(e)
	})
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("sunrpc: load saved replies: %w", err)
	}
	p := &persister{st: st, kick: make(chan struct{}, 1), done: make(chan struct{})}
	d.persist = p
	go p.run()
	return nil
}

// Intents calls resolve with every intent loaded by Persist that no reply
// followed (a call that may or may not have taken effect before the restart),
// and keeps what resolve returns as the intent its retransmission will be
// executed with (nil: forget it; the retransmission is a new call). The new
// intents are saved before Intents returns, so that what resolve learned from
// the state of the restart holds across a further restart. Call it after
// Persist, before serving: resolve sees the state the crash left, which
// nothing has changed since.
func (d *DRC) Intents(resolve func(k DRCKey, intent []byte) []byte) error {
	if d.persist == nil {
		return nil
	}
	d.mu.Lock()
	var loaded []*drcEntry
	for _, e := range d.entries {
		if e.intent != nil {
			loaded = append(loaded, e)
		}
	}
	d.mu.Unlock()
	var save []SavedReply
	for _, e := range loaded {
		b := resolve(e.key, e.intent)
		changed := !bytes.Equal(b, e.intent) // one resolved at an earlier start is saved already
		d.mu.Lock()
		if b == nil {
			d.remove(e)
		} else {
			d.bytes += len(b) - len(e.intent)
			e.intent = b
		}
		d.mu.Unlock()
		if b != nil && changed {
			save = append(save, SavedReply{Key: e.key, At: e.at, Reply: b, Intent: true})
		}
	}
	// One commit for all: the last save waits for it, the others are queued
	// into it.
	for i, r := range save {
		if err := d.persist.save(r, i == len(save)-1); err != nil {
			return fmt.Errorf("sunrpc: save a resolved intent: %w", err)
		}
	}
	return nil
}

// Loaded returns how many saved replies the cache holds (after Persist).
func (d *DRC) Loaded() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lru.Len()
}

// Close stops saving replies, once those already made are saved. Call it after
// the server's Shutdown; a DRC without Persist needs none.
func (d *DRC) Close() {
	if d.persist != nil {
		d.persist.close()
	}
}

// persister is the group commit of saved replies: a call making a reply queues
// it and (unless it is to be saved later) waits; one goroutine saves everything
// queued in one Save, so calls that finish while a commit runs share the next
// one, and a lone call waits for one commit only, never for a timer. Replies
// to be saved later only start a timer (laterDelay): they are saved with the
// next commit that a waiting call starts, or when it fires, so that an async
// export's calls, which flush nothing themselves, do not cause a flush each.
type persister struct {
	st   ReplyStore
	kick chan struct{} // something is queued; closed by close
	done chan struct{} // closed when run returns

	mu      sync.Mutex
	closed  bool           // guarded by mu
	queue   []SavedReply   // guarded by mu
	waiters []chan<- error // guarded by mu
	timer   *time.Timer    // the pending kick for replies saved later; guarded by mu
}

// laterDelay bounds how long a reply marked Call.SaveLater waits to be saved.
const laterDelay = 50 * time.Millisecond

// save queues r and, if wait, returns once it is durable (or failed).
func (p *persister) save(r SavedReply, wait bool) error {
	var ch chan error
	if wait {
		ch = make(chan error, 1)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errDRCClosed
	}
	p.queue = append(p.queue, r)
	if wait {
		p.waiters = append(p.waiters, ch)
		p.kickLocked()
	} else if p.timer == nil {
		p.timer = time.AfterFunc(laterDelay, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if !p.closed {
				p.kickLocked()
			}
		})
	}
	p.mu.Unlock()
	if !wait {
		return nil
	}
	return <-ch
}

// kickLocked wakes run. Called with mu held, so that close cannot close kick
// in between.
func (p *persister) kickLocked() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *persister) run() {
	defer close(p.done)
	for {
		_, open := <-p.kick
		p.mu.Lock()
		q, ws := p.queue, p.waiters
		p.queue, p.waiters = nil, nil
		if p.timer != nil {
			p.timer.Stop() // what it would save is saved now
			p.timer = nil
		}
		p.mu.Unlock()
		if len(q) > 0 {
			err := p.st.Save(q)
			for _, w := range ws {
				w <- err
			}
		}
		if !open {
			return
		}
	}
}

func (p *persister) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.timer != nil {
		p.timer.Stop() // run saves everything queued before it returns
	}
	close(p.kick)
	p.mu.Unlock()
	<-p.done
}
