// Package secrets will own the per-user secrets Store and its backends: the
// OS keychain, an encrypted file for headless servers, and memory.
package secrets
