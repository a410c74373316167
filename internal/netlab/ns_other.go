//go:build !linux

package netlab

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
)

const nsDir = "/run/netns"

type nsHandle struct{ name string }

func openNS(name string) (*nsHandle, error) { return nil, Check() }
func (n *nsHandle) close() error            { return nil }
func (n *nsHandle) do(func() error) error   { return Check() }

func setLabSysctls() error { return Check() }

func procStart(int) (uint64, error) { return 0, Check() }

// Check reports whether this machine can build labs; network namespaces
// are Linux only.
func Check() error { return fmt.Errorf("%w: not Linux (%s)", ErrUnsupported, runtime.GOOS) }

func ipPath() (string, error) { return "", errors.New("netlab: no ip command") }

func killNS(string) error { return nil }

type linkControl struct{}

func newLinkControl(*nsHandle) (*linkControl, error) { return nil, Check() }
func (*linkControl) index(string) (int, error)       { return 0, Check() }
func (*linkControl) setUp(int, bool) error           { return Check() }
func (*linkControl) close() error                    { return nil }

func labSysProcAttr() *syscall.SysProcAttr { return nil }
