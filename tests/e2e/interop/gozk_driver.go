// gozk_driver.go - go-zookeeper's Lock driven line by line, for test_interop.py
//
// Usage: gozk_driver <connect-string> <session-timeout-ms>
// Built by the test with Debian's golang-github-samuel-go-zookeeper-dev:
// GOPATH=/usr/share/gocode GO111MODULE=off go build -o DIR/gozk_driver gozk_driver.go
//
// Commands on stdin, one a line; answers on stdout, one a line, each
// printed when it happens (a test waits for them instead of sleeping):
//
//	acquire ID PATH mutex   zk.NewLock(...).Lock() on a connection (a
//	                        ZooKeeper session) of its own; answers
//	                        `acquired ID NODE CZXID PZXID` once it holds
//	                        (the node's creation zxid, the path's pzxid
//	                        read then), `error ID ...` if it fails
//	release ID              Unlock(): `released ID`
//	cancel ID               ends it whatever its state: Unlock() of a held
//	                        lock, `released ID`; a waiting Lock() cannot be
//	                        cancelled, so its connection is closed (its
//	                        session ends, its node goes): `cancelled ID`
//	quit                    exits
//
// At start, `ready`. go-zookeeper writes no data in its nodes.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/samuel/go-zookeeper/zk"
)

type holder struct {
	conn      *zk.Conn
	lock      *zk.Lock
	path      string
	release   chan struct{}
	state     sync.Mutex // guards held and cancelled
	held      bool       // Lock() returned
	cancelled bool       // `cancel` closed the connection first
}

var (
	out     sync.Mutex
	mu      sync.Mutex
	holders = map[string]*holder{}
	servers []string
	session time.Duration
)

func say(format string, args ...interface{}) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", args...)
	os.Stdout.Sync()
}

type quiet struct{}

func (quiet) Printf(string, ...interface{}) {}

// ownNode is the name and czxid of the child of path that conn's session
// created: Lock keeps its node's path to itself.
func ownNode(conn *zk.Conn, path string) (string, int64) {
	kids, _, err := conn.Children(path)
	if err != nil {
		return "?", -1
	}
	for _, k := range kids {
		_, st, err := conn.Get(path + "/" + k)
		if err == nil && st.EphemeralOwner == conn.SessionID() {
			return k, st.Czxid
		}
	}
	return "?", -1
}

func run(id string, h *holder) {
	err := h.lock.Lock()
	h.state.Lock()
	cancelled := h.cancelled
	h.held = err == nil && !cancelled
	h.state.Unlock()
	if err != nil || cancelled {
		mu.Lock()
		delete(holders, id)
		mu.Unlock()
		if cancelled {
			say("cancelled %s", id)
		} else {
			say("error %s acquire: %v", id, err)
		}
		h.conn.Close()
		return
	}
	node, czxid := ownNode(h.conn, h.path)
	var pzxid int64 = -1
	if _, st, err := h.conn.Exists(h.path); err == nil {
		pzxid = st.Pzxid
	}
	say("acquired %s %s %d %d", id, node, czxid, pzxid)
	<-h.release
	if err := h.lock.Unlock(); err != nil {
		say("error %s release: %v", id, err)
	} else {
		say("released %s", id)
	}
	h.conn.Close()
}

func command(line string) bool {
	w := strings.Fields(line)
	if len(w) == 0 {
		return true
	}
	id := "-"
	if len(w) > 1 {
		id = w[1]
	}
	mu.Lock()
	h := holders[id]
	mu.Unlock()
	switch w[0] {
	case "acquire":
		if len(w) < 4 || w[3] != "mutex" || h != nil {
			say("error %s usage: acquire ID PATH mutex (ID unused)", id)
			return true
		}
		conn, _, err := zk.Connect(servers, session, zk.WithLogger(quiet{}))
		if err != nil {
			say("error %s connect: %v", id, err)
			return true
		}
		h = &holder{conn: conn, path: w[2], release: make(chan struct{}),
			lock: zk.NewLock(conn, w[2], zk.WorldACL(zk.PermAll))}
		mu.Lock()
		holders[id] = h
		mu.Unlock()
		go run(id, h)
	case "release":
		if h == nil {
			say("error %s no such lock", id)
			return true
		}
		mu.Lock()
		delete(holders, id)
		mu.Unlock()
		close(h.release)
	case "cancel":
		if h == nil {
			say("error %s no such lock", id)
			return true
		}
		mu.Lock()
		delete(holders, id)
		mu.Unlock()
		h.state.Lock()
		held := h.held
		h.cancelled = !held
		h.state.Unlock()
		if held {
			close(h.release)
		} else {
			h.conn.Close()
		}
	case "quit":
		return false
	default:
		say("error %s unknown command %s", id, w[0])
	}
	return true
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gozk_driver <connect-string> <session-timeout-ms>")
		os.Exit(2)
	}
	servers = strings.Split(os.Args[1], ",")
	ms, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad session timeout:", err)
		os.Exit(2)
	}
	session = time.Duration(ms) * time.Millisecond
	say("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if !command(in.Text()) {
			break
		}
	}
}
