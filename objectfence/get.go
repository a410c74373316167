package objectfence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

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
}

// Get reads key's object and the epoch it was written under, so that a
// reader can refuse data written by a deposed leader (compare Epoch with
// the epoch it trusts). It returns ErrNotFound (a *DeletedError for a
// deletion marker), ErrNotFenced for an object written around this package,
// and ErrBadObject for one whose header or metadata is malformed or
// disagree, or that is larger than Config.MaxGet. Get is not fenced: it
// reads whatever the store holds.
func (s *Store) Get(ctx context.Context, key string) (Object, error) {
	if err := validKey(key); err != nil {
		return Object{}, err
	}
	out, err := s.api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		if status(err) == http.StatusNotFound {
			var ae interface{ ErrorCode() string }
			if !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchBucket" {
				return Object{}, fmt.Errorf("%w: %q", ErrNotFound, key)
			}
		}
		return Object{}, fmt.Errorf("objectfence: get %q: %w", key, err)
	}
	defer out.Body.Close()
	if out.ContentLength != nil && *out.ContentLength > s.maxGet {
		return Object{}, fmt.Errorf("%w: %q is %d bytes, more than MaxGet %d", ErrBadObject, key, *out.ContentLength, s.maxGet)
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, s.maxGet+1))
	if err != nil {
		return Object{}, fmt.Errorf("objectfence: get %q: %w", key, err)
	}
	if int64(len(data)) > s.maxGet {
		return Object{}, fmt.Errorf("%w: %q is more than MaxGet %d bytes", ErrBadObject, key, s.maxGet)
	}
	ep, k, payload, err := decode(out.Metadata, data)
	if err != nil {
		return Object{}, fmt.Errorf("objectfence: %q: %w", key, err)
	}
	if k == kindDeleted {
		return Object{}, &DeletedError{Key: key, Epoch: ep}
	}
	return Object{Key: key, Body: payload, Epoch: ep, ETag: aws.ToString(out.ETag)}, nil
}
