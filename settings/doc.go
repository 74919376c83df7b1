// Package settings will own settings forms (descriptor v1), their
// validation and JSON Schemas, and the per-user settings Store with its
// embedded SQLite implementation.
package settings
