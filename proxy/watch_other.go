//go:build !linux

package proxy

import "net"

// watcher is a no-op outside Linux: a client that leaves is noticed only
// when a write to it fails.
type watcher struct{}

type watchToken struct{}

func (watchToken) ok() bool { return false }

type connWatch struct{}

func (w *watcher) watchConn(conn net.Conn) *connWatch { return nil }
func (w *watcher) endConn(cw *connWatch)              {}
func (cw *connWatch) arm(gone *func())                {}
func (cw *connWatch) disarm()                         {}

func newWatcher() (*watcher, error)                            { return &watcher{}, nil }
func (w *watcher) watch(conn net.Conn, gone func()) watchToken { return watchToken{} }
func (w *watcher) unwatch(t watchToken)                        {}
func (w *watcher) close()                                      {}
