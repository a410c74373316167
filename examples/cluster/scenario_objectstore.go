package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/internal/s3server"
	"github.com/termfence/termfence/objectfence"
	"github.com/termfence/termfence/storageguard"
)

// objectKey is the one object the object-store scenario writes.
const objectKey = "state"

// runObjectStore is the paused-leader story against an S3 object store (a
// real versitygw server on loopback): A writes the object, reads it again
// for its next write — and pauses just before that write's conditional PUT
// goes out. B is elected in a higher term and writes. A wakes and sends its
// PUT: objectfence conditioned it on the ETag A read, which B's write
// replaced, so the store answers 412; objectfence reads again, finds B's
// newer epoch and refuses A's. B's object survives. With -unfenced A writes
// as a plain S3 client would (no condition, no epoch): its PUT lands and B's
// update is lost.
func runObjectStore(ctx context.Context, e *env) (*summary, error) {
	srv, err := s3server.Start(ctx, filepath.Join(e.dir, "versitygw"), "termfence-demo")
	if err != nil {
		return nil, failf("object-store needs the versitygw S3 server: %v", err)
	}
	defer srv.Close()
	gate := &putGate{API: srv.Client()}
	newStore := func(api objectfence.API) (*objectfence.Store, error) {
		return objectfence.New(objectfence.Config{Client: api, Bucket: srv.Bucket, Cluster: "demo", Verifier: e.codec, CacheSize: -1})
	}
	storeA, err := newStore(gate)
	if err != nil {
		return nil, err
	}
	storeB, err := newStore(srv.Client())
	if err != nil {
		return nil, err
	}
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	mode := "an S3 object store WITH fencing (objectfence: epoch in the object, conditional PUT)"
	if e.opts.unfenced {
		mode = "an S3 object store WITHOUT fencing (-unfenced: A writes as a plain S3 client)"
	}
	e.header(mode)
	e.tl.print("  object store: versitygw (%s) at %s, bucket %s, object %q", s3server.Version, srv.Endpoint, srv.Bucket, objectKey)

	var (
		late     = make(chan error, 1)
		snap     string
		refused  int
		lateDone bool
	)
	run, err := e.runScript(ctx, pauseScript{
		before: func(ctx context.Context, a *actor) error {
			r, err := storeA.Put(ctx, objectKey, []byte("v0"), a.tok)
			if err != nil {
				return err
			}
			e.tl.say(a.who(), "PUTs %s under %s -> stored, ETag %s", data("v0"), a.ep, r.ETag)
			o, err := storeA.Get(ctx, objectKey)
			if err != nil {
				return err
			}
			snap = string(o.Body)
			if e.opts.unfenced {
				e.tl.say(a.who(), "reads %s and is about to write %s — the pause strikes", data(snap), data(snap+" A"))
				return nil
			}
			// A's next Put reads the object's ETag and epoch and is
			// frozen just before its conditional PUT leaves.
			reached := gate.arm()
			go func() {
				_, err := storeA.Put(context.WithoutCancel(ctx), objectKey, []byte(snap+" A"), a.tok)
				late <- err
			}()
			select {
			case <-reached:
			case <-ctx.Done():
				return ctx.Err()
			}
			e.tl.say(a.who(), "reads %s (ETag %s, epoch %s); its PUT of %s with If-Match %s is ready — the pause strikes", data(snap), o.ETag, o.Epoch, data(snap+" A"), o.ETag)
			return nil
		},
		asB: func(ctx context.Context, b *actor) error {
			o, err := storeB.Get(ctx, objectKey)
			if err != nil {
				return err
			}
			r, err := storeB.Put(ctx, objectKey, []byte(string(o.Body)+" B"), b.tok)
			if err != nil {
				return failf("the new leader's PUT failed: %v", err)
			}
			e.tl.say(b.who(), "reads %s, PUTs %s under %s -> stored, ETag %s (replaced %s)", data(string(o.Body)), data(string(o.Body)+" B"), b.ep, r.ETag, r.Replaced)
			return nil
		},
		after: func(ctx context.Context, a *actor) error {
			if e.opts.unfenced {
				_, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{
					Bucket: aws.String(srv.Bucket), Key: aws.String(objectKey), Body: strings.NewReader(snap + " A"),
				})
				if err != nil {
					return err
				}
				e.tl.say(a.who(), "wakes, PUTs %s (plain PUT, no condition) -> stored", data(snap+" A"))
				return nil
			}
			gate.release()
			err := <-late
			lateDone = true
			if errors.Is(err, objectfence.ErrContention) || (err != nil && !isRefusal(err)) {
				return failf("A's late PUT: %v", err)
			}
			if err != nil {
				refused++
				e.tl.say(a.who(), "wakes, its PUT goes out with If-Match on the old ETag -> the store answers %s; objectfence reads again: REFUSED (%v)", gate.answer(), err)
				return nil
			}
			e.tl.say(a.who(), "wakes, its PUT goes out -> stored (the fence FAILED)")
			return nil
		},
	})
	if !lateDone {
		gate.release() // never leave A's Put frozen
	}
	if err != nil {
		return nil, err
	}

	value, how, err := finalObject(ctx, srv, storeB)
	if err != nil {
		return nil, err
	}
	lost := 0
	verdict := "B's update survives"
	if !slices.Contains(strings.Fields(value), "B") {
		lost = 1
		verdict = "B's update is LOST"
	}
	e.tl.say("result", "object %s = %s (%s)  %s", objectKey, data(value), how, verdict)
	sum := newSummary("object-store").
		add("fenced", !e.opts.unfenced).
		add("A", run.a.n.id).add("epochA", run.a.ep).
		add("B", run.b.n.id).add("epochB", run.b.ep).
		add("pause", ms(run.pause)).add("lease", ms(e.lease())).
		add("refused", refused).add("lost", lost).
		add("data", list(value))
	sum.ok = lost == 0
	return sum, nil
}

// isRefusal reports whether err is the fence refusing an epoch.
func isRefusal(err error) bool {
	return errors.Is(err, storageguard.ErrStale) || errors.Is(err, storageguard.ErrConflict) || errors.Is(err, storageguard.ErrForeignCluster)
}

// finalObject reads the object as it is in the end: through objectfence
// if it is a fenced object, else its raw bytes.
func finalObject(ctx context.Context, srv *s3server.Server, st *objectfence.Store) (string, string, error) {
	o, err := st.Get(ctx, objectKey)
	if err == nil {
		return string(o.Body), fmt.Sprintf("written under %s", o.Epoch), nil
	}
	if !errors.Is(err, objectfence.ErrNotFenced) {
		return "", "", err
	}
	out, err := srv.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(objectKey)})
	if err != nil {
		return "", "", err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, 1<<20))
	return string(b), "written around the fence, no epoch", err
}

// putGate freezes the next PutObject after arm until release: the moment
// between a Put's read and its conditional write, where a real pause (GC,
// SIGSTOP, a slow disk) can strike.
type putGate struct {
	objectfence.API
	mu       sync.Mutex
	armed    bool
	reached  chan struct{}
	released chan struct{}
	once     sync.Once
	status   string // the store's answer to the frozen PUT
}

// answer is the store's answer to the PUT that was frozen.
func (g *putGate) answer() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status
}

func (g *putGate) arm() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.reached, g.released = true, make(chan struct{}), make(chan struct{})
	return g.reached
}

func (g *putGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released != nil {
		g.once.Do(func() { close(g.released) })
	}
}

func (g *putGate) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	g.mu.Lock()
	armed, reached, released := g.armed, g.reached, g.released
	g.armed = false
	g.mu.Unlock()
	if !armed {
		return g.API.PutObject(ctx, in, o...)
	}
	close(reached)
	<-released
	out, err := g.API.PutObject(ctx, in, o...)
	st := "200"
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		st = fmt.Sprint(re.HTTPStatusCode())
	} else if err != nil {
		st = "no answer (" + err.Error() + ")"
	}
	g.mu.Lock()
	g.status = st
	g.mu.Unlock()
	return out, err
}
