package objectfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/objectfence"
	"github.com/termfence/termfence/storageguard"
)

// A leader writes an object under its token; a deposed leader's write is
// refused. (Needs an S3 endpoint; the package's tests run the same against
// versitygw.)
func ExampleStore_Put() {
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://127.0.0.1:7070"),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("KEY", "SECRET", ""),
	})
	codec, err := epoch.NewHMAC([]byte("a shared secret of at least 32 bytes"))
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := objectfence.New(objectfence.Config{Client: client, Bucket: "state", Cluster: "prod", Verifier: codec})
	if err != nil {
		fmt.Println(err)
		return
	}
	token, _ := codec.Sign(epoch.Epoch{Cluster: "prod", Term: 34, Leader: "n2"}) // from election.Token()
	_, err = st.Put(context.Background(), "config.json", []byte(`{"v":2}`), token)
	if errors.Is(err, storageguard.ErrStale) {
		fmt.Println("deposed: stop writing") // a newer leader wrote the object
	}
}

// The manifest pattern: data objects under unique names, made visible by
// one fenced Commit; a deposed writer's uploads become garbage.
func ExampleStore_Commit() {
	var st *objectfence.Store // objectfence.New(...)
	var token string          // the leader's token
	if st == nil {
		return
	}
	ctx := context.Background()
	var parts []string
	for _, chunk := range [][]byte{[]byte("part 1"), []byte("part 2")} {
		k, err := st.PutData(ctx, "table/data/", chunk, token)
		if err != nil {
			fmt.Println(err)
			return
		}
		parts = append(parts, k)
	}
	if _, err := st.Commit(ctx, "table/MANIFEST", []byte(strings.Join(parts, "\n")), token); err != nil {
		fmt.Println(err) // ErrStale: deposed; the parts stay invisible
		return
	}
	// Later, any node: what no manifest can ever name.
	m, err := st.Get(ctx, "table/MANIFEST")
	if err != nil {
		fmt.Println(err)
		return
	}
	live := strings.Split(string(m.Body), "\n")
	garbage, err := st.Garbage(ctx, "table/data/", m.Epoch, func(k string) bool {
		for _, l := range live {
			if l == k {
				return true
			}
		}
		return false
	})
	fmt.Println(garbage, err)
}
