// Package audit keeps the host's audit log: one [Record] per tool call,
// prompt get, resource read and the other acts an operator must be able to
// answer for ("who called which tool, when, with what outcome"), in a
// [Store] (SQLite: audit.db in the data folder, [OpenSQLite]; the
// interface leaves room for a PostgreSQL twin).
//
// # Durability rule: a bounded queue with counted drops
//
// A call never waits for the audit log. [Writer.Add] puts the record in a
// bounded in-memory queue (WriterOptions.Queue, default 8192) and returns;
// when the queue is full the record is dropped and counted
// ([Stats].Dropped, shown on the host's status), never blocking the call.
// One goroutine, owned by the Writer and joined by [Writer.Close], takes
// records off the queue and writes them in batches (one transaction per
// batch of up to WriterOptions.Batch), so a record reaches the disk within
// one batch of the call; on a crash (kill -9) the records still queued
// are lost (README "Audit log" gives the measured figure). Close drains
// the queue.
//
// The same goroutine sweeps the retention (records older than
// Retention.Days, and the oldest past Retention.Rows) at start and every
// Retention.Every.
//
// # Contents
//
// Records never hold a secret: credentials are named by their ID (a
// token's ID, an OAuth client's ID), never their value; settings and
// secret changes name the key, never the value. Arguments and results are
// kept only when the operator turns them on, capped in size.
//
// # Concurrency
//
// A Writer and a Store are safe for concurrent use.
package audit
