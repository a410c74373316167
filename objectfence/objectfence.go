package objectfence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

var (
	// ErrBadObject is returned when an object read back from the store
	// carries fencing metadata or a header that is not in the form this
	// package writes (a malformed or oversized epoch, a header that
	// disagrees with the metadata, an existing object without an ETag). A
	// Put or Delete refuses to write over it; remove or repair the object
	// by hand.
	ErrBadObject = errors.New("objectfence: malformed fenced object")
	// ErrNotFenced is returned by Get for an object written around this
	// package: no epoch metadata and no header.
	ErrNotFenced = errors.New("objectfence: object is not fenced")
	// ErrNotFound is returned by Get for a key with no object, or one whose
	// object is a deletion marker (then the error is a *DeletedError).
	ErrNotFound = errors.New("objectfence: no such object")
	// ErrContention is returned when a write lost its conditional request
	// Config.MaxAttempts times in a row to other writers of the same key,
	// or the key changed under every pair of reads. Nothing was written;
	// the call may be repeated.
	ErrContention = errors.New("objectfence: too much contention on the key")
	// ErrManifestChanged is returned by CommitOn when the manifest is no
	// longer the version its writer read: another Commit landed in
	// between. Nothing was written; read the manifest again and build the
	// new one from what it names now.
	ErrManifestChanged = errors.New("objectfence: the manifest changed since it was read")
)

// DeletedError reports a key whose object is a deletion marker written by
// Delete under Epoch. It matches ErrNotFound.
type DeletedError struct {
	Key   string
	Epoch epoch.Epoch
}

func (e *DeletedError) Error() string {
	return fmt.Sprintf("objectfence: %q was deleted under epoch %s", e.Key, e.Epoch)
}

// Is reports whether target is ErrNotFound.
func (e *DeletedError) Is(target error) bool { return target == ErrNotFound }

// API is the part of the S3 client this package uses; *s3.Client
// implements it. Wrap it to count, log or delay requests.
type API interface {
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, opts ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
}

var _ API = (*s3.Client)(nil)

// Defaults for the zero values of Config's fields.
const (
	DefaultMaxAttempts = 16
	DefaultCacheSize   = 1024
	DefaultMaxGet      = 256 << 20
)

// Config configures a Store. Client and Bucket are required.
type Config struct {
	// Client talks to the store. Required.
	Client API
	// Bucket holds the fenced objects. Required.
	Bucket string
	// Cluster, if set, is the only election group whose tokens are
	// admitted; others are refused with a *storageguard.ForeignError before
	// the store is touched. Empty: each object refuses an epoch of another
	// cluster than the one it carries.
	Cluster string
	// Verifier turns tokens into epochs, as storageguard.GuardConfig's.
	// Nil means epoch.Plain(): anyone who can reach the Store can present
	// any epoch (New logs a warning, through storageguard.NewGuard).
	Verifier epoch.Verifier
	// MaxAttempts bounds the conditional writes one Put or Delete tries
	// before it gives up with ErrContention. Zero: DefaultMaxAttempts.
	MaxAttempts int
	// CacheSize is how many keys' last written ETag and epoch the Store
	// remembers, so that a single writer's next Put of the key needs no
	// read first (a 412 tells it the entry is stale; it then reads). Zero:
	// DefaultCacheSize; negative: no cache.
	CacheSize int
	// MaxGet bounds the bytes Get reads of one object. Zero:
	// DefaultMaxGet.
	MaxGet int64
}

// Validate reports whether c is usable. The error wraps
// storageguard.ErrBadConfig.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return fmt.Errorf("%w: objectfence: no Client", storageguard.ErrBadConfig)
	case c.Bucket == "" || len(c.Bucket) > 255:
		return fmt.Errorf("%w: objectfence: Bucket %q is empty or longer than 255 bytes", storageguard.ErrBadConfig, c.Bucket)
	case c.MaxAttempts < 0:
		return fmt.Errorf("%w: objectfence: negative MaxAttempts", storageguard.ErrBadConfig)
	case c.MaxGet < 0:
		return fmt.Errorf("%w: objectfence: negative MaxGet", storageguard.ErrBadConfig)
	}
	return storageguard.GuardConfig{Cluster: c.Cluster}.Validate()
}

// Store writes fenced objects to one bucket. It is safe for concurrent
// use; several Stores, in several processes, may write the same keys.
type Store struct {
	api      API
	bucket   string
	guard    *storageguard.Guard
	attempts int
	maxGet   int64
	cache    *etagCache // nil: no cache
}

// New returns a Store for cfg, or cfg's Validate error.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		api:      cfg.Client,
		bucket:   cfg.Bucket,
		guard:    storageguard.NewGuard(verifyOnly{}, storageguard.GuardConfig{Cluster: cfg.Cluster, Verifier: cfg.Verifier}),
		attempts: cfg.MaxAttempts,
		maxGet:   cfg.MaxGet,
	}
	if s.attempts == 0 {
		s.attempts = DefaultMaxAttempts
	}
	if s.maxGet == 0 {
		s.maxGet = DefaultMaxGet
	}
	switch {
	case cfg.CacheSize == 0:
		s.cache = newETagCache(DefaultCacheSize)
	case cfg.CacheSize > 0:
		s.cache = newETagCache(cfg.CacheSize)
	}
	return s, nil
}

// verify turns token into an epoch (storageguard.Guard.Verify: missing,
// unsigned, badly signed, malformed and foreign tokens are refused) and
// checks key.
func (s *Store) verify(key, token string) (epoch.Epoch, error) {
	if err := validKey(key); err != nil {
		return epoch.Epoch{}, err
	}
	return s.guard.Verify(key, token)
}

// validKey refuses what S3 refuses as a key: empty, longer than 1024 bytes
// (storageguard.MaxResourceLen, the same bound), or not UTF-8; and every
// key not in the one canonical form that gives one object one key: '/'
// separates non-empty segments (no leading, doubled or trailing '/'), and
// no segment is "." or "..". A store that maps keys to file paths
// (versitygw's posix backend) names one file by "p//x", "p/./x", "/p/x"
// and "p/q/../x", yet conditions and locks each spelling apart: an older
// epoch's Put under one spelling landed after a newer one's under another.
func validKey(key string) error {
	if err := storageguard.ValidateResource(key); err != nil {
		return err
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: objectfence: key is not UTF-8", storageguard.ErrBadResource)
	}
	for i, seg := range strings.Split(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: objectfence: key %q has an empty segment (a leading, doubled or trailing '/') at segment %d: keys are in canonical form", storageguard.ErrBadResource, key, i+1)
		case ".", "..":
			return fmt.Errorf("%w: objectfence: key %q has a %q segment: keys are in canonical form", storageguard.ErrBadResource, key, seg)
		}
	}
	return nil
}

// verifyOnly is the fence behind the Store's Guard, which is used only for
// Guard.Verify: the Store's fence is the store's conditional write, not a
// storageguard.Fence (see the package doc).
type verifyOnly struct{}

var errVerifyOnly = errors.New("objectfence: internal: the guard only verifies tokens")

func (verifyOnly) Do(context.Context, string, epoch.Epoch, func(context.Context) error) error {
	return errVerifyOnly
}
func (verifyOnly) Admit(context.Context, string, epoch.Epoch) error { return errVerifyOnly }
func (verifyOnly) Check(context.Context, string, epoch.Epoch) error { return errVerifyOnly }
func (verifyOnly) Highest(context.Context, string) (epoch.Epoch, error) {
	return epoch.Epoch{}, errVerifyOnly
}
func (verifyOnly) Close() error { return nil }
