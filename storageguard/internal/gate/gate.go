// Package gate is the in-process lock of one fenced resource: a read-write
// lock whose shared side is held by the writes under the resource's current
// epoch and whose exclusive side is held by a raise (or a load of the
// durable record).
//
// It differs from sync.RWMutex in three ways, each a property the fences
// promise:
//
//   - Every wait ends when the caller's context does (Share, Lock). A
//     caller that gave up leaves nothing behind: no goroutine, no place in a
//     queue.
//   - A call nested in a shared hold never waits for itself. The context a
//     shared holder hands to its write (Run) records the hold, and Share
//     with that context (or one derived from it) joins the hold even while
//     an exclusive waiter holds newcomers back; Held tells the caller that
//     an exclusive wait would be a wait for itself.
//   - An exclusive waiter steps aside when an exclusive hold ended while it
//     waited (Lock reports false): what it queued to do (raise to an epoch)
//     may have been done by the hold that went before it, and the caller
//     decides again instead of waiting for the writes that hold followed
//     with.
//
// Exclusive waiters have preference: while one waits, new shared holds
// (other than nested ones) wait behind it, so a raise is not starved by a
// stream of writes under the older epoch; exclusive waiters go in the order
// they came.
package gate

import (
	"context"
	"sync"
)

// Gate is one resource's lock. The zero value is unlocked.
type Gate struct {
	mu      sync.Mutex
	shared  int32    // shared holds, nested ones included
	excl    bool     // an exclusive hold
	queued  int32    // callers waiting in Lock: new shared holds wait behind them
	tickets []uint32 // the queued callers' tickets, oldest first: Lock is first come, first served
	next    uint32   // the next ticket
	waiting int32    // callers waiting in Share or Lock
	gen     uint32   // exclusive holds ended so far (wraps; compared for equality)
	// wake is closed (and cleared) on every change a waiter may be
	// waiting for. It is made only when someone waits, so the uncontended
	// paths allocate nothing.
	wake chan struct{}
}

// heldKey is the context key of a shared hold.
type heldKey struct{}

// held is the context a shared holder's write runs with: it records the
// hold, for a call nested in the write.
type held struct {
	context.Context
	g      *Gate
	parent *held // the next hold out, of any gate
	active bool  // guarded by g.mu: the hold has not ended
}

// Value implements context.Context.
func (h *held) Value(key any) any {
	if key == (heldKey{}) {
		return h
	}
	return h.Context.Value(key)
}

// holdOf returns ctx's innermost hold of g that has not ended. Caller holds
// g.mu (active is guarded by it; holds of other gates are only walked).
func (g *Gate) holdOf(ctx context.Context) *held {
	h, _ := ctx.Value(heldKey{}).(*held)
	for ; h != nil; h = h.parent {
		if h.g == g && h.active {
			return h
		}
	}
	return nil
}

// hasHold reports, cheaply, whether ctx carries any hold at all.
func hasHold(ctx context.Context) bool {
	_, ok := ctx.Value(heldKey{}).(*held)
	return ok
}

func (g *Gate) signal() {
	if g.wake != nil {
		close(g.wake)
		g.wake = nil
	}
}

// await releases g.mu, waits for the next change or for ctx to end, and
// takes g.mu again. It reports ctx's error if ctx ended.
func (g *Gate) await(ctx context.Context) error {
	if g.wake == nil {
		g.wake = make(chan struct{})
	}
	ch := g.wake
	g.mu.Unlock()
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.mu.Lock()
	return err
}

// Share takes the shared side. It waits while an exclusive hold lasts or an
// exclusive waiter is queued, unless ctx records a shared hold of g that
// still lasts (a call nested in a write): that one joins at once. It
// returns the generation (Gen) as of the hold, or ctx's error, holding
// nothing, if ctx ends first.
func (g *Gate) Share(ctx context.Context) (uint32, error) {
	g.mu.Lock()
	if !g.excl && g.queued == 0 {
		g.shared++
		gen := g.gen
		g.mu.Unlock()
		return gen, nil
	}
	if hasHold(ctx) && g.holdOf(ctx) != nil {
		// Nested: the hold outside is still in, so no exclusive hold
		// can be; joining delays an exclusive waiter no longer than the
		// hold outside does.
		g.shared++
		gen := g.gen
		g.mu.Unlock()
		return gen, nil
	}
	g.waiting++
	for {
		err := g.await(ctx)
		if !g.excl && g.queued == 0 {
			g.waiting--
			g.shared++
			gen := g.gen
			g.mu.Unlock()
			return gen, nil
		}
		if err != nil {
			g.waiting--
			g.mu.Unlock()
			return 0, err
		}
	}
}

// Unshare releases a shared hold taken by Share or Downgrade.
func (g *Gate) Unshare() {
	g.mu.Lock()
	g.shared--
	if g.shared == 0 {
		g.signal()
	}
	g.mu.Unlock()
}

// Run runs write, while the caller holds the shared side, with a context
// that records the hold, then releases the hold (also if write panics). A
// nil write only releases it.
func (g *Gate) Run(ctx context.Context, write func(context.Context) error) error {
	if write == nil {
		g.Unshare()
		return nil
	}
	h := &held{Context: ctx, g: g, active: true}
	h.parent, _ = ctx.Value(heldKey{}).(*held)
	defer func() {
		g.mu.Lock()
		h.active = false
		g.shared--
		if g.shared == 0 {
			g.signal()
		}
		g.mu.Unlock()
	}()
	return write(h)
}

// With runs fn, while the caller holds the shared side, with a context that
// records the hold, and keeps the hold: the caller releases it (Unshare)
// after whatever else it has to undo first.
func (g *Gate) With(ctx context.Context, fn func(context.Context) error) error {
	h := &held{Context: ctx, g: g, active: true}
	h.parent, _ = ctx.Value(heldKey{}).(*held)
	defer func() {
		g.mu.Lock()
		h.active = false
		g.mu.Unlock()
	}()
	return fn(h)
}

// Held reports whether ctx records a shared hold of g that still lasts: a
// caller that would wait for the exclusive side would wait for itself.
func (g *Gate) Held(ctx context.Context) bool {
	if !hasHold(ctx) {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holdOf(ctx) != nil
}

// Gen returns how many exclusive holds have ended. Read while holding the
// shared side it is stable, and passing it to Lock asks "take the exclusive
// side unless an exclusive hold ended since I decided I need it".
func (g *Gate) Gen() uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen
}

// Lock takes the exclusive side once no hold lasts and every caller that
// queued in Lock before it has had its turn. It reports false,
// holding nothing, if an exclusive hold ended after the caller read gen
// (Gen), before or while it waited: the caller decides again. It returns
// ctx's error, holding nothing and queued nowhere, if ctx ends first. A
// caller whose context records a shared hold of g (Held) must not call it.
func (g *Gate) Lock(ctx context.Context, gen uint32) (bool, error) {
	g.mu.Lock()
	if g.gen != gen {
		g.mu.Unlock()
		return false, nil
	}
	if !g.excl && g.shared == 0 && g.queued == 0 {
		g.excl = true
		g.mu.Unlock()
		return true, nil
	}
	t := g.next
	g.next++
	g.tickets = append(g.tickets, t)
	g.queued++
	g.waiting++
	for {
		err := g.await(ctx)
		switch {
		case g.gen != gen:
			g.dequeue(t)
			g.mu.Unlock()
			return false, nil
		case err != nil:
			g.dequeue(t)
			g.mu.Unlock()
			return false, err
		case !g.excl && g.shared == 0 && g.tickets[0] == t:
			g.dequeue(t)
			g.excl = true
			g.mu.Unlock()
			return true, nil
		}
	}
}

// dequeue ends ticket t's wait in Lock and wakes the others: the next
// ticket may go first now, and with none queued shared callers held back
// by the wait may go on. Caller holds g.mu.
func (g *Gate) dequeue(t uint32) {
	for i, x := range g.tickets {
		if x == t {
			g.tickets = append(g.tickets[:i], g.tickets[i+1:]...)
			break
		}
	}
	if len(g.tickets) == 0 {
		g.tickets = nil
	}
	g.queued--
	g.waiting--
	g.signal()
}

// Unlock releases the exclusive side.
func (g *Gate) Unlock() {
	g.mu.Lock()
	g.excl = false
	g.gen++
	g.signal()
	g.mu.Unlock()
}

// Downgrade turns the exclusive hold into a shared one, with no moment
// between in which another caller could take the exclusive side.
func (g *Gate) Downgrade() {
	g.mu.Lock()
	g.excl = false
	g.shared++
	g.gen++
	g.signal()
	g.mu.Unlock()
}

// Waiting returns how many callers wait in Share or Lock now.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int(g.waiting)
}
