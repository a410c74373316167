//go:build !unix

package fencetest_test

import "github.com/termfence/termfence/storageguard/fencetest"

// harnessDurable is unused off unix, where RunChild runs no children.
var harnessDurable fencetest.Durable
