package gateway

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A unix socket is listened on with mode 0660 from the moment it appears
// at its path: it is made in a private directory and linked into place,
// which leaves nothing behind. A stale socket is replaced, any other file
// is not, and closing the listener removes the socket.
func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "http.sock")
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // a socket file an earlier process left behind

	ln, err := listenUnix(path)
	if err != nil {
		t.Fatalf("listenUnix over a stale socket: %v", err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket %v, %v; want a socket of mode 0660", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want only the socket: %v", len(entries), entries)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the renamed socket: %v", err)
	}
	c.Close()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after Close: %v", err)
	}

	regular := filepath.Join(dir, "data")
	if err := os.WriteFile(regular, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ln, err := listenUnix(regular); err == nil {
		ln.Close()
		t.Error("listenUnix replaced a regular file")
	}
	if b, _ := os.ReadFile(regular); string(b) != "keep" {
		t.Error("the regular file was changed")
	}
}
