package objectfence

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/termfence/termfence/epoch"
)

// MetaEpoch is the object metadata key that carries a fenced object's epoch,
// in epoch's canonical text form "cluster/term/leader". Over the S3 API it
// is the header x-amz-meta-termfence-epoch.
const MetaEpoch = "termfence-epoch"

// Magic starts the first line of every fenced object's bytes: the header
// line
//
//	termfence-object/1 <epoch> <nonce> <kind>\n
//
// where <epoch> is the epoch's text form (the same as the MetaEpoch value),
// <nonce> 32 lowercase hex digits drawn at random for each write, and
// <kind> "data" or "deleted" (a tombstone, whose payload is empty). The
// application's bytes follow the newline. A store whose ETag is a hash of
// the bytes (S3's MD5 for single-part uploads, versitygw's) would give a
// newer epoch's write of the same bytes the ETag of the older write, and a
// deposed writer's If-Match on that ETag would land (the ABA case): the
// epoch in the bytes prevents that, and the nonce makes every write's
// bytes, hence its ETag, unique, so that an ETag names one write.
const Magic = "termfence-object/1"

// maxHeader bounds the header line: Magic, an epoch (at most 150 bytes),
// the nonce, the kind and the separators fit well within it. A longer
// first line is refused before it is parsed.
const maxHeader = 512

// maxMetaValue bounds the MetaEpoch value read back from a store; a longer
// one is refused before it is parsed.
const maxMetaValue = 256

const nonceLen = 16 // bytes; 32 hex digits

type kind int

const (
	kindData kind = iota + 1
	kindDeleted
)

func (k kind) String() string {
	switch k {
	case kindData:
		return "data"
	case kindDeleted:
		return "deleted"
	}
	return "invalid"
}

// encode returns the bytes of a fenced object.
func encode(ep epoch.Epoch, nonce [nonceLen]byte, k kind, payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(Magic) + 200 + len(payload))
	b.WriteString(Magic)
	b.WriteByte(' ')
	b.WriteString(ep.String())
	b.WriteByte(' ')
	b.WriteString(hex.EncodeToString(nonce[:]))
	b.WriteByte(' ')
	b.WriteString(k.String())
	b.WriteByte('\n')
	b.Write(payload)
	return b.Bytes()
}

// epochFromMetadata returns the epoch an object's metadata carries, false
// if it carries none (an object written around this package), or an error
// matching ErrBadObject if the value is not a valid epoch. Metadata keys
// are matched without regard to case (the SDK lowercases them; other
// clients may not); two keys that differ only in case are refused as
// ambiguous.
func epochFromMetadata(md map[string]string) (epoch.Epoch, bool, error) {
	var (
		val   string
		found bool
	)
	for k, v := range md {
		if !strings.EqualFold(k, MetaEpoch) {
			continue
		}
		if found {
			return epoch.Epoch{}, false, fmt.Errorf("%w: metadata has %q twice (keys differing in case)", ErrBadObject, MetaEpoch)
		}
		val, found = v, true
	}
	if !found {
		return epoch.Epoch{}, false, nil
	}
	if len(val) > maxMetaValue {
		return epoch.Epoch{}, false, fmt.Errorf("%w: metadata %s is %d bytes, more than %d", ErrBadObject, MetaEpoch, len(val), maxMetaValue)
	}
	ep, err := epoch.Parse(val)
	if err != nil {
		return epoch.Epoch{}, false, fmt.Errorf("%w: metadata %s: %w", ErrBadObject, MetaEpoch, err)
	}
	return ep, true, nil
}

// decode checks a fenced object's bytes against its metadata and returns
// its epoch, kind and payload. Everything here is read back from the store
// and untrusted: any deviation from the form encode writes is an error
// matching ErrBadObject; an object with neither the metadata nor the header
// matches ErrNotFenced.
func decode(md map[string]string, data []byte) (epoch.Epoch, kind, []byte, error) {
	metaEp, hasMeta, err := epochFromMetadata(md)
	if err != nil {
		return epoch.Epoch{}, 0, nil, err
	}
	if !bytes.HasPrefix(data, []byte(Magic+" ")) {
		if hasMeta {
			return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: metadata names epoch %s but the bytes have no %s header", ErrBadObject, metaEp, Magic)
		}
		return epoch.Epoch{}, 0, nil, ErrNotFenced
	}
	head := data
	if len(head) > maxHeader {
		head = head[:maxHeader]
	}
	nl := bytes.IndexByte(head, '\n')
	if nl < 0 {
		return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: header line not ended within %d bytes", ErrBadObject, maxHeader)
	}
	fields := strings.Split(string(head[len(Magic)+1:nl]), " ")
	if len(fields) != 3 {
		return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: header has %d fields after %s, want 3 (epoch nonce kind)", ErrBadObject, len(fields), Magic)
	}
	ep, err := epoch.Parse(fields[0])
	if err != nil {
		return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: header epoch: %w", ErrBadObject, err)
	}
	if len(fields[1]) != 2*nonceLen || strings.ToLower(fields[1]) != fields[1] {
		return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: header nonce is not %d lowercase hex digits", ErrBadObject, 2*nonceLen)
	}
	if _, err := hex.DecodeString(fields[1]); err != nil {
		return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: header nonce is not %d lowercase hex digits", ErrBadObject, 2*nonceLen)
	}
	var k kind
	switch fields[2] {
	case "data":
		k = kindData
	case "deleted":
		k = kindDeleted
	default:
		return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: header kind %q is neither data nor deleted", ErrBadObject, fields[2])
	}
	payload := data[nl+1:]
	if k == kindDeleted && len(payload) != 0 {
		return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: a deletion marker carries %d bytes", ErrBadObject, len(payload))
	}
	if !hasMeta {
		return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: header names epoch %s but the metadata has no %s", ErrBadObject, ep, MetaEpoch)
	}
	if metaEp != ep {
		return epoch.Epoch{}, 0, nil, fmt.Errorf("%w: header names epoch %s, metadata %s", ErrBadObject, ep, metaEp)
	}
	return ep, k, payload, nil
}
