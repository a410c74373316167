package objectfence

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
)

// Object is a fenced object read back by Get.
type Object struct {
	Key   string
	Body  []byte      // the bytes given to Put (the header removed)
	Epoch epoch.Epoch // the epoch it was written under
	ETag  string

	// verified: ETag is the MD5 of the bytes read (etagOf), so it names
	// the write whose epoch is Epoch (CommitOn relies on it).
	verified bool
}

// Get reads key's object and the epoch it was written under, so that a
// reader can refuse data written by a deposed leader (compare Epoch with
// the epoch it trusts). It returns ErrNotFound (a *DeletedError for a
// deletion marker), ErrNotFenced for an object written around this package,
// and ErrBadObject for one whose header or metadata is malformed or
// disagree, or that is larger than Config.MaxGet. Get is not fenced: it
// reads whatever the store holds.
//
// On a store whose ETag of a single-part upload is the MD5 of its bytes (S3,
// versitygw), Get checks that the ETag it returns is the MD5 of the bytes it
// read: versitygw's posix backend reads the ETag and the data one after the
// other, by path, so a GET racing a write could pair one write's ETag with
// another's body. A torn read is read again, up to Config.MaxAttempts
// times, then ErrContention.
func (s *Store) Get(ctx context.Context, key string) (Object, error) {
	if err := validKey(key); err != nil {
		return Object{}, err
	}
	for attempt := 1; ; attempt++ {
		o, torn, err := s.getOnce(ctx, key)
		if err != nil || !torn {
			return o, err
		}
		if attempt >= s.attempts {
			return Object{}, fmt.Errorf("%w: %q: every read paired an ETag with another write's bytes (%d)", ErrContention, key, attempt)
		}
	}
}

// getOnce is one GET of key; torn reports an ETag in MD5 form that is not
// the MD5 of the bytes read.
func (s *Store) getOnce(ctx context.Context, key string) (o Object, torn bool, err error) {
	out, err := s.api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		if status(err) == http.StatusNotFound {
			var ae interface{ ErrorCode() string }
			if !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchBucket" {
				return Object{}, false, fmt.Errorf("%w: %q", ErrNotFound, key)
			}
		}
		return Object{}, false, fmt.Errorf("objectfence: get %q: %w", key, err)
	}
	defer out.Body.Close()
	if out.ContentLength != nil && *out.ContentLength > s.maxGet {
		return Object{}, false, fmt.Errorf("%w: %q is %d bytes, more than MaxGet %d", ErrBadObject, key, *out.ContentLength, s.maxGet)
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, s.maxGet+1))
	if err != nil {
		return Object{}, false, fmt.Errorf("objectfence: get %q: %w", key, err)
	}
	if int64(len(data)) > s.maxGet {
		return Object{}, false, fmt.Errorf("%w: %q is more than MaxGet %d bytes", ErrBadObject, key, s.maxGet)
	}
	ep, k, payload, err := decode(out.Metadata, data)
	if err != nil {
		return Object{}, false, fmt.Errorf("objectfence: %q: %w", key, err)
	}
	if k == kindDeleted {
		return Object{}, false, &DeletedError{Key: key, Epoch: ep}
	}
	etag := aws.ToString(out.ETag)
	md5Form, match := etagOf(etag, data)
	if md5Form && !match {
		return Object{}, true, nil
	}
	return Object{Key: key, Body: payload, Epoch: ep, ETag: etag, verified: match}, false, nil
}

// etagOf reports whether etag has the form of a single-part upload's ETag
// (the quoted hex MD5 of the bytes, as S3 and versitygw give it), and if so
// whether it is the MD5 of data.
func etagOf(etag string, data []byte) (md5Form, match bool) {
	h := strings.Trim(etag, `"`)
	if len(h) != 2*md5.Size {
		return false, false
	}
	want, err := hex.DecodeString(h)
	if err != nil {
		return false, false
	}
	sum := md5.Sum(data)
	return true, bytes.Equal(sum[:], want)
}
