//go:build !linux

package cgroup

import (
	"errors"
	"os"
	"syscall"
	"time"
)

var errLinuxOnly = errors.New("cgroups are Linux only")

// Tree is a cgroup tree; outside Linux there is none.
type Tree struct{ Dir string }

// Open fails outside Linux.
func Open(string) (*Tree, error) { return nil, errLinuxOnly }

// Create fails outside Linux.
func (*Tree) Create(string) (string, *os.File, error) { return "", nil, errLinuxOnly }

// Children is none outside Linux.
func (*Tree) Children() []string { return nil }

// Contains is false outside Linux.
func (*Tree) Contains(int) bool { return false }

// Tidy does nothing outside Linux.
func (*Tree) Tidy() {}

// Mount fails outside Linux.
func Mount() (string, error) { return "", errLinuxOnly }

// Of fails outside Linux.
func Of(string) (string, error) { return "", errLinuxOnly }

// Signal does nothing outside Linux.
func Signal(string, syscall.Signal) {}

// Kill does nothing outside Linux.
func Kill(string) {}

// Procs is none outside Linux.
func Procs(string) []int { return nil }

// Populated is false outside Linux.
func Populated(string) bool { return false }

// Remove does nothing outside Linux.
func Remove(string, time.Duration) error { return nil }
