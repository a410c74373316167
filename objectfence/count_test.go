package objectfence_test

import "sync/atomic"

type atomicCount = atomic.Int64
