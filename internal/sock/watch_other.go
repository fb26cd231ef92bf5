//go:build !linux

package sock

import "net"

// Watcher reports nothing outside Linux: a client that leaves is noticed
// only when a write to it fails, and no Conn is pumped.
type Watcher struct{}

// Token identifies one registration; here there are none.
type Token struct{}

// OK reports a registration made: never here.
func (Token) OK() bool { return false }

// NewWatcher returns a watcher that reports nothing.
func NewWatcher() (*Watcher, error) { return &Watcher{}, nil }

// Watch registers nothing here.
func (*Watcher) Watch(net.Conn, func()) Token { return Token{} }

// WatchEnd registers nothing here: c stays not Pumpable.
func (*Watcher) WatchEnd(*Conn) Token { return Token{} }

// WatchIdle watches nothing here: true.
func (*Watcher) WatchIdle(Token, func(bool)) bool { return true }

// EndIdle: nothing was watched, true.
func (*Watcher) EndIdle(Token) bool { return true }

// Unwatch does nothing here.
func (*Watcher) Unwatch(Token) {}

// Close does nothing here.
func (*Watcher) Close() {}
