// Package bench holds the cross-module benchmarks of DESIGN.md §7, each
// printing our figure beside its baseline from the same run.
package bench
