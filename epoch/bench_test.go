package epoch_test

import (
	"crypto/ed25519"
	"testing"

	"github.com/termfence/termfence/epoch"
)

func BenchmarkParse(b *testing.B) {
	s := e34.String()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := epoch.Parse(s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkString(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = e34.String()
	}
}

func BenchmarkCompare(b *testing.B) {
	o := epoch.Epoch{Cluster: "prod", Term: 35, Leader: "node-c"}
	b.ReportAllocs()
	for b.Loop() {
		_ = e34.Compare(o)
	}
}

func BenchmarkTokens(b *testing.B) {
	h := mustHMAC(b, key32)
	pub, priv := edKey(b, 1)
	codecs := []codecCase{
		{"plain", epoch.Plain(), epoch.Plain()},
		{"hmac", h, h},
		{"ed25519", epoch.NewEd25519Signer(priv), epoch.NewEd25519Verifier(pub)},
	}
	for _, c := range codecs {
		b.Run(c.name+"/sign", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.s.Sign(e34); err != nil {
					b.Fatal(err)
				}
			}
		})
		tok, _ := c.s.Sign(e34)
		b.Run(c.name+"/verify", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.v.Verify(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	_ = ed25519.PublicKeySize
}
