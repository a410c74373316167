package objectfence

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// A data object's name is prefix + "<term>.<nonce>": the term as 20
// decimal digits (so names sort by term), a dot, 32 lowercase hex digits.
const (
	termDigits = 20
	dataSuffix = termDigits + 1 + 2*nonceLen
)

// PutData writes body as a new immutable data object under prefix, with a
// unique name that carries the writer's term, and returns its key. It
// verifies token but fences nothing: a new name has nothing to be fenced
// against. The object is invisible until a Commit of the manifest names it;
// a deposed writer's Commit is refused, so what it uploaded stays garbage,
// which Garbage lists.
func (s *Store) PutData(ctx context.Context, prefix string, body []byte, token string) (string, error) {
	var n [nonceLen]byte
	if _, err := crand.Read(n[:]); err != nil {
		return "", fmt.Errorf("objectfence: nonce: %w", err)
	}
	ep, err := s.guard.Verify(prefix, token)
	if err != nil {
		return "", err
	}
	key := prefix + fmt.Sprintf("%0*d.%s", termDigits, ep.Term, hex.EncodeToString(n[:]))
	if err := validKey(key); err != nil {
		return "", err
	}
	data := encode(ep, n, kindData, body)
	_, err = s.api.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		Metadata:      map[string]string{MetaEpoch: ep.String()},
		IfNoneMatch:   aws.String("*"),
	})
	if err != nil {
		return "", fmt.Errorf("objectfence: put data %q: %w", key, err)
	}
	return key, nil
}

// CommitOn is Commit conditioned on the manifest version its writer read:
// read is the manifest as Get returned it, or nil if the writer found none
// (ErrNotFound). The manifest is written only if it is still that version,
// under an epoch the fence admits (the same refusals as Put), with one
// conditional PUT; if another Commit landed in between it returns
// ErrManifestChanged and writes nothing, so that a manifest built on an
// older version can never land over a newer one and name what the newer
// one dropped. That is what makes Garbage safe: a leader of term 9 that
// read M6 = {X6} while a deposed leader of term 7 committed M7 = {Y7},
// after which Garbage listed X6 and the caller deleted it, cannot commit
// {X6, Y9}: its CommitOn on M6 fails. It is not retried: a changed
// manifest must be read again.
//
// Cost: when Get verified read's ETag (the MD5 of the bytes it read, so
// it names the write whose epoch read carries), CommitOn sends the PUT
// alone, conditioned on that ETag: if it lands, the object it replaced was
// that write, and the epoch was decided on that write's epoch. Otherwise
// (a store whose ETags are not MD5s, an Object built by hand) it first
// reads the manifest's ETag and epoch as Put does (two HEADs) and refuses
// at once if the ETag is not read's.
func (s *Store) CommitOn(ctx context.Context, manifestKey string, manifest []byte, token string, read *Object) (Result, error) {
	ep, err := s.verify(manifestKey, token)
	if err != nil {
		return Result{}, err
	}
	if read != nil && read.Key != manifestKey {
		return Result{}, fmt.Errorf("objectfence: CommitOn %q: read is the object of %q", manifestKey, read.Key)
	}
	var cur state // the version the PUT is conditioned on
	switch {
	case read == nil:
		// If-None-Match: * decides at the store.
	case read.verified:
		cur = state{exists: true, etag: read.ETag, epoch: read.Epoch}
		if _, err := storageguard.Decide(manifestKey, cur.epoch, ep); err != nil {
			return Result{}, err
		}
	default:
		if cur, err = s.read(ctx, manifestKey, ep); err != nil {
			return Result{}, err
		}
		if cur.etag != read.ETag {
			return Result{}, fmt.Errorf("%w: %q is at ETag %s, the manifest was built on %s", ErrManifestChanged, manifestKey, quoteETag(cur.etag), quoteETag(read.ETag))
		}
	}
	var nonce [nonceLen]byte
	if _, err := crand.Read(nonce[:]); err != nil {
		return Result{}, fmt.Errorf("objectfence: nonce: %w", err)
	}
	data := encode(ep, nonce, kindData, manifest)
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(manifestKey),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		Metadata:      map[string]string{MetaEpoch: ep.String()},
	}
	if read == nil {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(read.ETag)
	}
	out, err := s.api.PutObject(ctx, in)
	s.cache.drop(manifestKey)
	if err != nil {
		if lostRace(err) {
			return Result{}, fmt.Errorf("%w: %q: %w", ErrManifestChanged, manifestKey, err)
		}
		return Result{}, fmt.Errorf("objectfence: commit %q: %w", manifestKey, err)
	}
	res := Result{Replaced: cur.etag, Epoch: ep, Previous: cur.epoch, Attempts: 1}
	if out != nil && out.ETag != nil {
		res.ETag = *out.ETag
		s.cache.put(manifestKey, state{exists: true, etag: res.ETag, epoch: ep})
		_, match := etagOf(res.ETag, data)
		res.committed = &Object{Key: manifestKey, Body: append([]byte(nil), manifest...), Epoch: ep, ETag: res.ETag, verified: match}
	}
	return res, nil
}

func quoteETag(etag string) string {
	if etag == "" {
		return "(none)"
	}
	return etag
}

// Garbage lists the data objects under prefix that no manifest can ever
// name: those written by PutData under a term older than committed (the
// epoch of the manifest now in the store, as Get returns it) and for which
// referenced (the committed manifest's own list) returns false. A writer
// of an older term can no longer Commit, so such an object stays invisible
// for good and may be deleted. Objects of the committed term or newer are
// never listed (their writer may still commit them), nor are keys not
// named as PutData names them.
//
// "No manifest can ever name" holds only if every commit of the manifest
// is a CommitOn on the version its writer read. With Commit, which
// conditions only on the epoch, a newer leader that read an older manifest
// (M6 = {X6}) before a deposed leader committed M7 = {Y7} can commit
// {X6, Y9} after Garbage listed X6: a manifest naming a deleted object.
//
// The listing is the store's and may be incomplete on a store whose
// listings are eventually consistent; what it misses is found by a later
// call. Only what is listed is garbage: liveness is decided by the manifest,
// never by a listing.
func (s *Store) Garbage(ctx context.Context, prefix string, committed epoch.Epoch, referenced func(key string) bool) ([]string, error) {
	var (
		out   []string
		token *string
	)
	for {
		page, err := s.api.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
			Bucket: aws.String(s.bucket), Prefix: aws.String(prefix), ContinuationToken: token,
		})
		if err != nil {
			return nil, fmt.Errorf("objectfence: list %q: %w", prefix, err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			term, ok := dataTerm(prefix, key)
			if !ok || term >= committed.Term || (referenced != nil && referenced(key)) {
				continue
			}
			out = append(out, key)
		}
		if !aws.ToBool(page.IsTruncated) || page.NextContinuationToken == nil {
			return out, nil
		}
		token = page.NextContinuationToken
	}
}

// dataTerm parses the term out of a data object's key, false if the key is
// not named as PutData names them. Keys come from a listing: untrusted.
func dataTerm(prefix, key string) (uint64, bool) {
	if !strings.HasPrefix(key, prefix) || len(key)-len(prefix) != dataSuffix {
		return 0, false
	}
	rest := key[len(prefix):]
	if rest[termDigits] != '.' {
		return 0, false
	}
	for i := 0; i < termDigits; i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return 0, false
		}
	}
	term, err := strconv.ParseUint(rest[:termDigits], 10, 64)
	if err != nil {
		return 0, false
	}
	nonce := rest[termDigits+1:]
	if strings.ToLower(nonce) != nonce {
		return 0, false
	}
	if _, err := hex.DecodeString(nonce); err != nil {
		return 0, false
	}
	return term, true
}
