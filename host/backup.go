package host

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"filippo.io/age"
	_ "modernc.org/sqlite" // the pure Go driver, registered as "sqlite"

	"github.com/agenthost/agenthost/secrets"
)

// BackupFormat is the version of the archive format [Backup] writes.
// [Restore] refuses an archive of a newer format.
const BackupFormat = 1

// ErrBackupKey is wrapped by [Restore]'s error when the passphrase does not
// open the archive.
var ErrBackupKey = errors.New("the passphrase does not open this backup")

// BackupManifest describes an archive; it is its first entry,
// manifest.json.
type BackupManifest struct {
	Format  int       `json:"format"`
	Version string    `json:"agenthost_version"`
	Created time.Time `json:"created"`
	// Schemas maps each database in the archive to its schema version
	// (goose), 0 when it has none.
	Schemas map[string]int64 `json:"schemas"`
	Files   []BackupFile     `json:"files"`
	// Secrets is how many secrets secrets.json holds.
	Secrets int `json:"secrets"`
}

// BackupFile is one file of the archive: its path (slash-separated, under
// the data folder; secrets.json for the secrets) and its SHA-256.
type BackupFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// backupSecret is one secret in secrets.json.
type backupSecret struct {
	Extension string `json:"extension"`
	User      string `json:"user"` // secrets.Operator for the operator
	Name      string `json:"name"`
	Value     []byte `json:"value"`
}

const secretsEntry = "secrets.json"

// scryptWorkFactor, when not 0, replaces age's scrypt work factor (2^18,
// about a second a key) in tests, where the race detector makes it ten
// times slower.
var scryptWorkFactor int

// backupSkip reports whether a data folder file is left out of an archive:
// the secrets file backend (its secrets are exported through the store,
// re-encrypted under the archive's key), SQLite side files (each database
// is copied whole and consistent), and the control socket.
func backupSkip(rel string) bool {
	base := path.Base(rel)
	switch base {
	case "secrets.enc", "secrets.key", "secrets.enc.lock":
		return true
	}
	for _, s := range []string{"-wal", "-shm", "-journal", ".lock"} {
		if strings.HasSuffix(base, s) {
			return true
		}
	}
	return false
}

var sqliteMagic = []byte("SQLite format 3\x00")

func isSQLite(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, len(sqliteMagic))
	_, err = io.ReadFull(f, b)
	return err == nil && bytes.Equal(b, sqliteMagic)
}

// Backup writes to w one archive of everything the host of cfg keeps:
// every file of its data folder (each SQLite database as an online,
// consistent copy taken with VACUUM INTO, so the host may be serving and
// writing meanwhile) and every secret of its secrets backend, enumerated
// for the operator and every user any store knows, in every extension.
// The archive (tar, gzip) is encrypted whole with age under passphrase
// (scrypt). The secrets are never written in clear, also not to a
// temporary file; the files are first copied (one snapshot, hashed for the
// manifest) into a private temporary folder (0700), removed after.
func Backup(ctx context.Context, cfg *Config, passphrase string, w io.Writer) (*BackupManifest, error) {
	if passphrase == "" {
		return nil, errors.New("backup: an empty passphrase")
	}
	dataDir := cfg.DataPath()
	if _, err := os.Stat(dataDir); err != nil {
		return nil, fmt.Errorf("backup: the data folder: %w", err)
	}
	tmp, err := os.MkdirTemp("", "agenthost-backup-")
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(tmp)

	m := &BackupManifest{Format: BackupFormat, Version: Build().Version, Created: time.Now().UTC().Truncate(time.Second), Schemas: map[string]int64{}}
	type entry struct{ name, src string }
	var entries []entry
	users := map[string]bool{}
	exts := map[string]bool{}
	for name := range cfg.Extensions {
		exts[name] = true
	}
	err = filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dataDir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			// users/<u>/<ext>/...
			if parts := strings.Split(rel, "/"); len(parts) >= 2 && parts[0] == "users" {
				users[parts[1]] = true
				if len(parts) >= 3 {
					exts[parts[2]] = true
				}
			}
			return nil
		}
		if !d.Type().IsRegular() || backupSkip(rel) {
			return nil
		}
		// Every file is copied first, so that the manifest's hashes and
		// the archive are of one snapshot even if the host writes on.
		src := filepath.Join(tmp, fmt.Sprintf("f%d", len(entries)))
		if isSQLite(p) {
			v, err := copySQLite(ctx, p, src, users, exts)
			if err != nil {
				return fmt.Errorf("copying the database %s: %w", rel, err)
			}
			m.Schemas[rel] = v
		} else if err := copyFile(p, src); err != nil {
			return fmt.Errorf("copying %s: %w", rel, err)
		}
		entries = append(entries, entry{rel, src})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}

	sec, _, err := openSecrets(ctx, cfg.Secrets.Backend, dataDir)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer sec.Close()
	list, err := exportSecrets(ctx, sec, users, exts)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	secJSON, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	defer clear(secJSON)
	m.Secrets = len(list)

	// Hash every file first: the manifest leads the archive.
	for _, e := range entries {
		f, err := hashFile(e.src)
		if err != nil {
			return nil, fmt.Errorf("backup: %s: %w", e.name, err)
		}
		f.Name = e.name
		m.Files = append(m.Files, f)
	}
	sum := sha256.Sum256(secJSON)
	m.Files = append(m.Files, BackupFile{Name: secretsEntry, Size: int64(len(secJSON)), SHA256: hex.EncodeToString(sum[:])})

	rcp, err := age.NewScryptRecipient(passphrase)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if scryptWorkFactor != 0 {
		rcp.SetWorkFactor(scryptWorkFactor)
	}
	enc, err := age.Encrypt(w, rcp)
	if err != nil {
		return nil, fmt.Errorf("backup: encrypting: %w", err)
	}
	gz := gzip.NewWriter(enc)
	tw := tar.NewWriter(gz)
	mj, _ := json.MarshalIndent(m, "", "  ")
	if err := writeTar(tw, "manifest.json", bytes.NewReader(mj), int64(len(mj))); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := writeTar(tw, secretsEntry, bytes.NewReader(secJSON), int64(len(secJSON))); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	for i, e := range entries {
		f, err := os.Open(e.src)
		if err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		err = writeTar(tw, "data/"+e.name, f, m.Files[i].Size)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("backup: %s: %w", e.name, err)
		}
	}
	if err := errors.Join(tw.Close(), gz.Close(), enc.Close()); err != nil {
		return nil, fmt.Errorf("backup: writing the archive: %w", err)
	}
	return m, nil
}

// copyFile copies the regular file src to dst (0600).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

func writeTar(tw *tar.Writer, name string, r io.Reader, size int64) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("%s changed while it was archived (%d bytes of %d)", name, n, size)
	}
	return err
}

func hashFile(p string) (BackupFile, error) {
	f, err := os.Open(p)
	if err != nil {
		return BackupFile{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return BackupFile{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, err
}

// copySQLite writes a consistent copy of the database src to dst with
// VACUUM INTO (a read transaction: writers of other processes go on), and
// returns its goose schema version. It adds the users and extensions the
// database names (settings, tokens, grants) to users and exts, so that
// their secrets are looked up.
func copySQLite(ctx context.Context, src, dst string, users, exts map[string]bool) (int64, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: filepath.ToSlash(src), RawQuery: q.Encode()}).String())
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		return 0, err
	}
	if err := os.Chmod(dst, 0o600); err != nil {
		return 0, err
	}
	var v sql.NullInt64
	_ = db.QueryRowContext(ctx, "SELECT MAX(version_id) FROM goose_db_version").Scan(&v)
	for _, q := range []struct{ sql string }{
		{"SELECT DISTINCT user_id FROM settings"},
		{"SELECT DISTINCT user_id FROM tokens WHERE user_id != ''"},
		{"SELECT DISTINCT user_id FROM grants"},
	} {
		collect(ctx, db, q.sql, users)
	}
	collect(ctx, db, "SELECT DISTINCT ext FROM settings", exts)
	return v.Int64, nil
}

// collect adds the strings query returns to set; a database without the
// table adds nothing.
func collect(ctx context.Context, db *sql.DB, query string, set map[string]bool) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if rows.Scan(&s) == nil && s != "" {
			set[s] = true
		}
	}
}

// exportSecrets reads every secret of the operator and of users, in every
// extension of exts.
func exportSecrets(ctx context.Context, sec secrets.Store, users, exts map[string]bool) ([]backupSecret, error) {
	owners := []string{secrets.Operator}
	for u := range users {
		if ValidUser(u) {
			owners = append(owners, u)
		}
	}
	sort.Strings(owners)
	names := make([]string, 0, len(exts))
	for e := range exts {
		names = append(names, e)
	}
	sort.Strings(names)
	var out []backupSecret
	for _, ext := range names {
		for _, u := range owners {
			list, err := sec.List(ctx, ext, u)
			if errors.Is(err, secrets.ErrInvalid) {
				continue // not an extension name the store takes
			}
			if err != nil {
				return nil, fmt.Errorf("listing the secrets: %w", err)
			}
			for _, n := range list {
				v, err := sec.Get(ctx, secrets.Key{Extension: ext, User: u, Name: n})
				if errors.Is(err, secrets.ErrNotFound) {
					continue // a keychain index entry without its secret
				}
				if err != nil {
					return nil, fmt.Errorf("reading the secret %q of extension %s: %w", n, ext, err)
				}
				out = append(out, backupSecret{Extension: ext, User: u, Name: n, Value: []byte(v.Reveal())})
			}
		}
	}
	return out, nil
}

// Restore brings the archive r, written by [Backup] and opened with
// passphrase, onto the data folder of cfg, which must be empty or absent,
// and imports its secrets into cfg's secrets backend (which may differ
// from the one backed up: file, keychain). It checks everything before
// writing anything: a wrong passphrase (an error wrapping [ErrBackupKey]),
// a newer format, a file whose SHA-256 differs from the manifest's, all
// leave the data folder as it was. The host of cfg must not be running.
func Restore(ctx context.Context, cfg *Config, passphrase string, r io.Reader) (*BackupManifest, error) {
	dataDir := cfg.DataPath()
	if ents, err := os.ReadDir(dataDir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("restore: the data folder %s is not empty: restore only onto an empty one", dataDir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("restore: %w", err)
	}
	id, err := age.NewScryptIdentity(passphrase)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	dec, err := age.Decrypt(r, id)
	if err != nil {
		var nm *age.NoIdentityMatchError
		if errors.As(err, &nm) {
			return nil, fmt.Errorf("restore: %w", ErrBackupKey)
		}
		return nil, fmt.Errorf("restore: not an agenthost backup, or a damaged one: %w", err)
	}
	gz, err := gzip.NewReader(dec)
	if err != nil {
		return nil, fmt.Errorf("restore: a damaged backup: %w", err)
	}
	tr := tar.NewReader(gz)

	// Unpack into a private folder beside the data folder, check it, then
	// move it into place.
	parent := filepath.Dir(dataDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	stage, err := os.MkdirTemp(parent, ".agenthost-restore-")
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(stage)

	var m *BackupManifest
	var secJSON []byte
	defer func() { clear(secJSON) }()
	got := map[string]BackupFile{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("restore: a damaged backup: %w", err)
		}
		switch {
		case h.Name == "manifest.json":
			m = &BackupManifest{}
			if err := json.NewDecoder(io.LimitReader(tr, 1<<24)).Decode(m); err != nil {
				return nil, fmt.Errorf("restore: the manifest: %w", err)
			}
			if m.Format > BackupFormat {
				return nil, fmt.Errorf("restore: the backup has format %d, written by agenthost %s; this agenthost (%s) reads format %d and older: restore with a newer agenthost", m.Format, m.Version, Build().Version, BackupFormat)
			}
		case m == nil:
			return nil, errors.New("restore: a damaged backup: the manifest is not first")
		case h.Name == secretsEntry:
			if secJSON, err = io.ReadAll(io.LimitReader(tr, 1<<30)); err != nil {
				return nil, fmt.Errorf("restore: a damaged backup: %w", err)
			}
			sum := sha256.Sum256(secJSON)
			got[secretsEntry] = BackupFile{Name: secretsEntry, Size: int64(len(secJSON)), SHA256: hex.EncodeToString(sum[:])}
		case strings.HasPrefix(h.Name, "data/") && h.Typeflag == tar.TypeReg:
			rel := strings.TrimPrefix(h.Name, "data/")
			if !filepath.IsLocal(filepath.FromSlash(rel)) {
				return nil, fmt.Errorf("restore: a damaged backup: the path %q leaves the data folder", h.Name)
			}
			f, err := writeStaged(filepath.Join(stage, filepath.FromSlash(rel)), tr)
			if err != nil {
				return nil, fmt.Errorf("restore: %s: %w", rel, err)
			}
			f.Name = rel
			got[rel] = f
		default:
			return nil, fmt.Errorf("restore: a damaged backup: an unknown entry %q", h.Name)
		}
	}
	if m == nil {
		return nil, errors.New("restore: a damaged backup: no manifest")
	}
	for _, f := range m.Files {
		g, ok := got[f.Name]
		if !ok {
			return nil, fmt.Errorf("restore: a damaged backup: %s is missing", f.Name)
		}
		if g.SHA256 != f.SHA256 || g.Size != f.Size {
			return nil, fmt.Errorf("restore: a damaged backup: %s does not match its SHA-256 in the manifest", f.Name)
		}
		delete(got, f.Name)
	}
	for name := range got {
		return nil, fmt.Errorf("restore: a damaged backup: %s is not in the manifest", name)
	}
	var list []backupSecret
	if err := json.Unmarshal(secJSON, &list); err != nil {
		return nil, fmt.Errorf("restore: the secrets: %w", err)
	}

	// Everything checked: open the target's secrets backend (so that an
	// unreachable keychain fails before anything is written), move the
	// files in, then import the secrets.
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	sec, _, err := openSecrets(ctx, cfg.Secrets.Backend, dataDir)
	if err != nil {
		_ = os.Remove(dataDir) // only if still empty
		return nil, fmt.Errorf("restore: %w", err)
	}
	defer sec.Close()
	ents, err := os.ReadDir(stage)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	for _, e := range ents {
		if err := os.Rename(filepath.Join(stage, e.Name()), filepath.Join(dataDir, e.Name())); err != nil {
			return nil, fmt.Errorf("restore: %w (the data folder %s is partly restored: empty it and restore again)", err, dataDir)
		}
	}
	for _, s := range list {
		err := sec.Set(ctx, secrets.Key{Extension: s.Extension, User: s.User, Name: s.Name}, secrets.NewValue(string(s.Value)))
		clear(s.Value)
		if err != nil {
			return nil, fmt.Errorf("restore: importing the secret %q of extension %s: %w (the data folder %s is partly restored: empty it and restore again)", s.Name, s.Extension, err, dataDir)
		}
	}
	return m, nil
}

// writeStaged writes r to p (0600, folders 0700) and returns its size and
// SHA-256.
func writeStaged(p string, r io.Reader) (BackupFile, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return BackupFile{}, err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return BackupFile{}, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return BackupFile{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, err
}
