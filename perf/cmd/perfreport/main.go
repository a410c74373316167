package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/termfence/termfence/perf/results"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("perfreport", flag.ContinueOnError)
	fs.SetOutput(stderr)
	png := fs.String("png", "", "also draw the distributions into this PNG file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: perfreport [-png FILE] RESULT.json...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("perfreport: no result files")
	}
	var all []results.Result
	for _, path := range fs.Args() {
		f, err := results.ReadFile(path)
		if err != nil {
			return err
		}
		all = append(all, f.Results...)
	}
	t, err := table(all)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, t); err != nil {
		return err
	}
	if *png != "" {
		if err := renderPNG(*png, all); err != nil {
			return err
		}
	}
	return nil
}
