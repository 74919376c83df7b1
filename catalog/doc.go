// Package catalog will own the per-user catalog engine: activate, refresh,
// retire, drain, quarantine and publish, generic over a Connector.
package catalog
