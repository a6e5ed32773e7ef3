// Command tidemark operates the positions of tidemark Loaders: status,
// rewind, export, import and import-kcl, on a Loader's journal directory
// (--dir) or a fleet's DynamoDB table (--table). Install it with
//
//	go install github.com/tidemark/tidemark/cmd/tidemark@latest
//
// and run "tidemark help". It is a module of its own so that the library
// does not depend on the DynamoDB client; docs/operations.md is the guide.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tidemark/tidemark/cmd/tidemark/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
