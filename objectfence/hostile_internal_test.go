package objectfence

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
)

// FuzzDecode feeds decode (what Get and Put trust of an object read back
// from the store: its metadata value and its bytes) arbitrary input. It
// must never panic; it accepts only what encode writes (decode∘encode is
// the identity on accepted input), and every refusal matches ErrBadObject
// or ErrNotFenced.
func FuzzDecode(f *testing.F) {
	e := epoch.Epoch{Cluster: "c", Term: 7, Leader: "n1"}
	var nonce [nonceLen]byte
	good := encode(e, nonce, kindData, []byte("payload\nwith lines"))
	f.Add(e.String(), good)
	f.Add(e.String(), encode(e, nonce, kindDeleted, nil))
	f.Add("", []byte("plain object"))
	f.Add("c/07/n1", good)
	f.Add("c/18446744073709551616/n1", good)
	f.Add(strings.Repeat("c", 300)+"/1/a", good)
	f.Add(e.String(), []byte(Magic+" c/7/n1 00 data\n"))
	f.Add(e.String(), []byte(Magic+" c/7/n1 "+strings.Repeat("0", 32)+" deleted\nx"))
	f.Add(e.String(), []byte(Magic+" c/8/n1 "+strings.Repeat("0", 32)+" data\n"))
	f.Add(e.String(), append([]byte(Magic+" "), bytes.Repeat([]byte("x"), 600)...))
	f.Fuzz(func(t *testing.T, meta string, data []byte) {
		md := map[string]string{}
		if meta != "" {
			md[MetaEpoch] = meta
		}
		ep, k, payload, err := decode(md, data)
		if err != nil {
			if !errors.Is(err, ErrBadObject) && !errors.Is(err, ErrNotFenced) {
				t.Fatalf("refusal %v matches neither ErrBadObject nor ErrNotFenced", err)
			}
			return
		}
		if ep.String() != meta {
			t.Fatalf("accepted metadata %q as %s", meta, ep)
		}
		nl := bytes.IndexByte(data, '\n')
		fields := strings.Split(string(data[:nl]), " ")
		var n [nonceLen]byte
		if _, err := hexDecode(n[:], fields[2]); err != nil {
			t.Fatalf("accepted nonce %q: %v", fields[2], err)
		}
		if again := encode(ep, n, k, payload); !bytes.Equal(again, data) {
			t.Fatalf("decode accepted %q, which encode writes as %q", data, again)
		}
	})
}

// FuzzEpochFromMetadata: the metadata value alone, under keys of any case.
func FuzzEpochFromMetadata(f *testing.F) {
	f.Add("termfence-epoch", "c/1/a", "")
	f.Add("Termfence-Epoch", "c/1/a", "c/2/a")
	f.Add("termfence-epoch", "c/0/a", "")
	f.Add("termfence-epoch", " c/1/a", "")
	f.Fuzz(func(t *testing.T, key, v1, v2 string) {
		md := map[string]string{key: v1}
		if v2 != "" {
			md[strings.ToUpper(key)] = v2
		}
		ep, ok, err := epochFromMetadata(md)
		switch {
		case err != nil:
			if !errors.Is(err, ErrBadObject) {
				t.Fatalf("refusal %v does not match ErrBadObject", err)
			}
		case ok:
			if err := ep.Validate(); err != nil || ep.String() != md[key] && ep.String() != md[strings.ToUpper(key)] {
				t.Fatalf("accepted %v as %s (%v)", md, ep, err)
			}
		default:
			for k := range md {
				if strings.EqualFold(k, MetaEpoch) {
					t.Fatalf("%v has the key but was taken as unfenced", md)
				}
			}
		}
	})
}

// FuzzDataTerm: names from a listing, untrusted.
func FuzzDataTerm(f *testing.F) {
	f.Add("p/", "p/00000000000000000003."+strings.Repeat("a", 32))
	f.Add("p/", "p/99999999999999999999."+strings.Repeat("a", 32))
	f.Add("p/", "p/-0000000000000000003."+strings.Repeat("a", 32))
	f.Fuzz(func(t *testing.T, prefix, key string) {
		term, ok := dataTerm(prefix, key)
		if !ok {
			return
		}
		var n [nonceLen]byte
		if _, err := hexDecode(n[:], key[len(key)-2*nonceLen:]); err != nil {
			t.Fatal(err)
		}
		if want := prefix + strings.Repeat("0", 0) + pad(term) + "." + key[len(key)-2*nonceLen:]; want != key {
			t.Fatalf("accepted %q as term %d (%q)", key, term, want)
		}
	})
}
