package objectstory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/s3server"
	"github.com/termfence/termfence/objectfence"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/transport"
)

type member struct {
	id  string
	net *transport.Faulty
	el  *election.Election
}

// cluster starts three in-memory election nodes on in-memory transports.
func cluster(t *testing.T) []*member {
	t.Helper()
	var (
		ms    []*member
		mems  []*transport.Inmem
		boots []election.Server
	)
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		m := transport.NewInmem(id)
		for _, p := range mems {
			m.Connect(p)
		}
		mems = append(mems, m)
		ms = append(ms, &member{id: id, net: transport.NewFaulty(m)})
		boots = append(boots, election.Server{ID: id, Addr: string(m.LocalAddr())})
	}
	for _, m := range ms {
		el, err := election.New(election.Config{
			ID: m.id, Cluster: "objects", InMemory: true, Transport: m.net, Bootstrap: boots,
			Logger:           slog.New(slog.DiscardHandler),
			HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		m.el = el
		t.Cleanup(func() { _ = el.Close() })
	}
	return ms
}

// leaderOf waits until one of ms (other than skip) holds a confirmed epoch
// newer than after, and returns it with its token.
func leaderOf(t *testing.T, ms []*member, skip *member, after uint64) (*member, epoch.Epoch, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond) // poll interval
	defer tick.Stop()
	for {
		for _, m := range ms {
			if m == skip {
				continue
			}
			if e, err := m.el.Epoch(); err == nil && e.Term > after {
				tk, err := m.el.Token()
				if err != nil {
					continue // stepped down between the two calls
				}
				return m, e, tk
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader newer than term %d", after)
		case <-tick.C:
		}
	}
}

// pauseOnce blocks the first PutObject until released: the leader's
// process pauses (GC, SIGSTOP, a slow disk) between its read and its
// conditional write.
type pauseOnce struct {
	objectfence.API
	armed    chan struct{}
	reached  chan struct{}
	released chan struct{}
}

func (p *pauseOnce) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	select {
	case <-p.armed:
		select {
		case <-p.reached:
		default:
			close(p.reached)
			<-p.released
		}
	default:
	}
	return p.API.PutObject(ctx, in, o...)
}

// TestPausedLeaderObject: leader A writes the object, pauses between its
// read and its conditional write, is cut off, B is elected in a newer term
// and writes; A's late write is refused by the store and B's object
// survives. The unfenced control (a plain PUT by A) loses B's object.
func TestPausedLeaderObject(t *testing.T) {
	srv := s3server.ForTest(t, "story")
	ms := cluster(t)
	const key = "state.json"
	ctx := context.Background()

	a, ea, ta := leaderOf(t, ms, nil, 0)
	p := &pauseOnce{API: srv.Client(), armed: make(chan struct{}), reached: make(chan struct{}), released: make(chan struct{})}
	sa, err := objectfence.New(objectfence.Config{Client: p, Bucket: "story", Cluster: "objects", Verifier: epoch.Plain()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Put(ctx, key, []byte("v0 by "+a.id), ta); err != nil {
		t.Fatal(err)
	}
	close(p.armed)
	late := make(chan error, 1)
	go func() {
		_, err := sa.Put(ctx, key, []byte("late v1 by "+a.id), ta)
		late <- err
	}()
	<-p.reached // A read the object and holds its ETag
	a.net.Isolate()

	b, eb, tb := leaderOf(t, ms, a, ea.Term)
	sb, err := objectfence.New(objectfence.Config{Client: srv.Client(), Bucket: "story", Cluster: "objects", Verifier: epoch.Plain()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Put(ctx, key, []byte("v1 by "+b.id), tb); err != nil {
		t.Fatal(err)
	}
	close(p.released) // A wakes up and sends its conditional PUT
	err = <-late
	var se *storageguard.StaleError
	if !errors.As(err, &se) || se.Presented != ea || se.Highest != eb {
		t.Fatalf("A's late Put: %v, want a StaleError naming %s and %s", err, ea, eb)
	}
	o, err := sb.Get(ctx, key)
	if err != nil || string(o.Body) != "v1 by "+b.id || o.Epoch != eb {
		t.Fatalf("after A's late write: %q under %s (%v), want B's v1 under %s", o.Body, o.Epoch, err, eb)
	}
	t.Logf("A (%s) refused: %v", ea, se)

	// The control: the same late write without the fence lands over B's.
	if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("story"), Key: aws.String(key), Body: strings.NewReader("late v1 by " + a.id),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Get(ctx, key); !errors.Is(err, objectfence.ErrNotFenced) {
		t.Fatalf("after the unfenced late write: %v, want B's object gone (ErrNotFenced)", err)
	}
}
