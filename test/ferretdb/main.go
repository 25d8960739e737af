// ferretdb: a MongoDB-wire server for coraine's tests of --database mongoc.
//
// FerretDB v1.24.2 embedded through its Go package on the SQLite backend (its
// own cmd/ferretdb panics at start for want of a generated version file).
// Usage: ferretdb -listen 127.0.0.1:PORT -dir DIR. It runs until killed.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:27017", "address to listen on (loopback)")
	dir := flag.String("dir", "", "directory of the SQLite databases")
	flag.Parse()
	if *dir == "" {
		log.Fatal("ferretdb: -dir is required")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		log.Fatal(err)
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: *listen},
		Handler:   "sqlite",
		SQLiteURL: "file:" + abs + "/",
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Printf("ferretdb: listening on %s, data in %s", *listen, abs)
	f.Run(ctx)
}
