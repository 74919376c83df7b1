package settings_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/settings"
	"github.com/agenthost/agenthost/settings/settingstest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	settingstest.Run(t, func(t *testing.T) settings.Store { return settings.NewMemoryStore() })
}

func TestSQLiteStore(t *testing.T) {
	t.Parallel()
	settingstest.Run(t, func(t *testing.T) settings.Store { return openSQLite(t, filepath.Join(t.TempDir(), "settings.db")) })
}

// openSQLite opens a store at path and closes it when the test ends.
func openSQLite(t testing.TB, path string) *settings.SQLiteStore {
	t.Helper()
	s, err := settings.OpenSQLite(path, nil)
	if err != nil {
		t.Fatalf("OpenSQLite: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSQLiteReopenKeepsEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "data", "settings.db")
	s := openSQLite(t, path)
	want := map[string]map[string]string{
		"alice": {"prefs": `{"theme":"dark"}`, "servers": `{"notes":false,"search":true}`},
		"bob":   {"prefs": `{"theme":"light"}`},
	}
	for user, secs := range want {
		for sec, v := range secs {
			if err := s.Set(ctx, "mcp", user, sec, json.RawMessage(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = openSQLite(t, path)
	got := map[string]map[string]string{}
	users, err := s.Users(ctx, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		secs, err := s.Sections(ctx, "mcp", u)
		if err != nil {
			t.Fatal(err)
		}
		got[u] = map[string]string{}
		for k, v := range secs {
			got[u][k] = string(v)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values after reopening (-want +got):\n%s", diff)
	}
}

func TestSQLiteOddPath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a dir?#%", "settings file?.db")
	s := openSQLite(t, path)
	if err := s.Set(context.Background(), "e", "u", "s", json.RawMessage(`{"ok":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the database is not where it was asked to be: %v", err)
	}
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
}

// inspect opens the database file directly, beside the store.
func inspect(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSQLiteMigrationsAndRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "settings.db")
	for range 3 { // migrations run once, however often the file is opened
		s := openSQLite(t, path)
		if err := s.Update(ctx, "e", "u", "s", func(old json.RawMessage) (json.RawMessage, error) {
			var m map[string]int
			if err := json.Unmarshal(old, &m); err != nil {
				return nil, err
			}
			m["n"]++
			return json.Marshal(m)
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db := inspect(t, path)
	var versions []int
	rows, err := db.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	rows.Close()
	if diff := cmp.Diff([]int{1, 2}, versions); diff != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", diff)
	}
	var (
		value     string
		version   int
		updatedAt int64
	)
	if err := db.QueryRowContext(ctx, `SELECT value, version, updated_at FROM settings WHERE ext='e' AND user_id='u' AND section='s'`).Scan(&value, &version, &updatedAt); err != nil {
		t.Fatal(err)
	}
	if value != `{"n":3}` || version != 3 || updatedAt <= 0 {
		t.Errorf("row = %s, version %d, updated_at %d; want {\"n\":3}, version 3, a timestamp", value, version, updatedAt)
	}
	// The table itself refuses what the store would refuse.
	if _, err := db.ExecContext(ctx, `UPDATE settings SET value = '[]'`); err == nil {
		t.Error("the settings table accepted a non-object value")
	}
}

func TestSQLiteRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "settings.db")
	openSQLite(t, path).Close()
	if _, err := inspect(t, path).Exec(`INSERT INTO schema_migrations VALUES (99, 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := settings.OpenSQLite(path, nil); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("OpenSQLite of a newer schema = %v, want a 'newer' error", err)
	}
	// The same when goose recorded the newer version (a newer agenthost).
	path = filepath.Join(t.TempDir(), "settings.db")
	openSQLite(t, path).Close()
	if _, err := inspect(t, path).Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := settings.OpenSQLite(path, nil); err == nil || !strings.Contains(err.Error(), "schema version 99 is newer") {
		t.Errorf("OpenSQLite of a schema goose says is newer = %v, want a 'newer' error", err)
	}
}

// TestSQLiteAdoptsSchemaBeforeGoose: a database written before the stores
// used goose (versions in schema_migrations only) is adopted: its versions
// are recorded in goose_db_version and nothing is applied twice; a fresh
// one records every version in both tables.
func TestSQLiteAdoptsSchemaBeforeGoose(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "settings.db")
	s := openSQLite(t, path)
	if err := s.Set(context.Background(), "e", "u", "s", json.RawMessage(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := inspect(t, path)
	// Make it look as the binaries before goose left it.
	if _, err := db.Exec(`DROP TABLE goose_db_version`); err != nil {
		t.Fatal(err)
	}
	s = openSQLite(t, path)
	got, err := s.Get(context.Background(), "e", "u", "s")
	s.Close()
	if err != nil || string(got) != `{"n":1}` {
		t.Fatalf("after adoption: %s %v", got, err)
	}
	var gooseMax, legacyMax int
	if err := db.QueryRow(`SELECT (SELECT MAX(version_id) FROM goose_db_version WHERE is_applied),
		(SELECT MAX(version) FROM schema_migrations)`).Scan(&gooseMax, &legacyMax); err != nil {
		t.Fatal(err)
	}
	if gooseMax != legacyMax || gooseMax < 1 {
		t.Errorf("versions after adoption: goose %d, schema_migrations %d; want the same", gooseMax, legacyMax)
	}
}

// TestSQLiteTwoStoresOneFile stands for two processes: the stores share no
// locks, so only the row version keeps their Updates from losing each
// other's increments.
func TestSQLiteTwoStoresOneFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "settings.db")
	stores := []*settings.SQLiteStore{openSQLite(t, path), openSQLite(t, path)}
	const perStore, increments = 5, 40
	inc := func(old json.RawMessage) (json.RawMessage, error) {
		var m map[string]int
		if err := json.Unmarshal(old, &m); err != nil {
			return nil, err
		}
		m["n"]++
		return json.Marshal(m)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*perStore)
	for _, s := range stores {
		for range perStore {
			wg.Go(func() {
				for range increments {
					if err := s.Update(ctx, "e", "u", "counter", inc); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := stores[1].Get(ctx, "e", "u", "counter")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`{"n":%d}`, 2*perStore*increments); string(got) != want {
		t.Errorf("counter = %s, want %s", got, want)
	}
}

func TestStoresValidateNothingButShape(t *testing.T) {
	t.Parallel()
	// The store keeps what it is given (validation is the caller's job),
	// compacted.
	for name, s := range map[string]settings.Store{
		"memory": settings.NewMemoryStore(),
		"sqlite": openSQLite(t, filepath.Join(t.TempDir(), "s.db")),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			defer s.Close()
			ctx := context.Background()
			if err := s.Set(ctx, "e", "u", "s", json.RawMessage(" {\"anything\" : [1, {\"goes\": null}]}\n")); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, "e", "u", "s")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(`{"anything":[1,{"goes":null}]}`, string(got)); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
			err = s.Update(ctx, "e", "u", "s", nil)
			if !errors.Is(err, settings.ErrInvalid) {
				t.Errorf("Update with a nil fn = %v, want ErrInvalid", err)
			}
		})
	}
}
