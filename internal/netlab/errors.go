package netlab

import "errors"

var (
	// ErrUnsupported: this machine cannot build a lab (not Linux, no
	// CAP_NET_ADMIN and CAP_SYS_ADMIN, no `ip` from iproute2, or network
	// namespaces refused). The wrapping error says which.
	ErrUnsupported = errors.New("netlab: network namespaces are not available")
	// ErrClosed: the lab was closed.
	ErrClosed = errors.New("netlab: lab is closed")
	// ErrInvalid: a Config, a host or a fault that cannot be: a bad host
	// name, a host of another lab, a host cut from itself, two modes on one
	// link. Nothing was changed.
	ErrInvalid = errors.New("netlab: invalid argument")
)
