package main

import (
	"context"
	"io"
)

func demoMain(ctx context.Context, args []string, stdout, stderr io.Writer) error { return nil }
