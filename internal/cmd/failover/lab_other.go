//go:build !linux

package main

import "errors"

func newLabSystems(params, string) ([]system, func(), error) {
	return nil, nil, errors.New("-net netlab needs Linux network namespaces")
}

func labNodeMain([]string) int { return 2 }
