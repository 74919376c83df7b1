package secrets

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"
)

// The store file is, byte by byte:
//
//	magic    8  "AHSECRET"
//	version  1  1
//	key ID   8  the first 8 bytes of HMAC-SHA256(key, "agenthost secrets file key id v1")
//	nonce   12  fresh from crypto/rand on every write
//	sealed   …  AES-256-GCM of the JSON document, with magic+version+key ID as additional data
//
// The key ID lets a wrong key be told apart from a corrupt file; it reveals
// nothing about the key. Authenticating the header means that a changed
// version or key ID fails like any other tampering.
const (
	fileMagic       = "AHSECRET"
	fileVersion     = 1
	fileKeySize     = 32
	fileKeyIDSize   = 8
	fileHeaderSize  = len(fileMagic) + 1 + fileKeyIDSize // the additional data
	fileNonceSize   = 12
	filePrefixSize  = fileHeaderSize + fileNonceSize
	fileTagSize     = 16
	fileMinSize     = filePrefixSize + fileTagSize
	fileMaxSize     = 256 << 20
	fileKeyIDLabel  = "agenthost secrets file key id v1"
	fileOpenTimeout = 30 * time.Second
)

// FileOptions configure [OpenFile]. A nil *FileOptions selects a key file
// next to the store.
type FileOptions struct {
	// KeyFile is the path of the file holding the 32-byte encryption key.
	// When empty it is the store's path with ".key" appended. OpenFile
	// creates it (mode 0600, 32 bytes from crypto/rand) when neither it nor
	// the store exists yet. Keep it on a different volume or in a secrets
	// mount (for example a systemd credential) for the encryption to protect
	// against a stolen disk or backup.
	KeyFile string

	// Keychain, when non-nil, holds the encryption key instead of a key
	// file, as an item of its service. Set KeyFile or Keychain, not both.
	Keychain *Keychain

	_ struct{}
}

// File is a Store kept in one encrypted file, for headless servers without
// a keychain.
//
// The whole store is a JSON document encrypted with AES-256-GCM under a
// fresh random nonce on every write; the file's header is authenticated. A
// write goes to a temporary file in the same directory, which is synced and
// renamed over the store, and then the directory is synced, so a crash
// leaves the old or the new store, never a mix. The store and key files are
// created with mode 0600 in a directory created with mode 0700, and are
// refused when group or others may access them; the directory is refused
// when group or others may write to it.
//
// Writes are serialized by a mutex within the process and by an exclusive
// flock on the store's path with ".lock" appended across processes (on
// Linux, macOS and the BSDs; elsewhere only within the process). Reads need
// no lock: a rename is atomic. A decrypted copy is cached and reused while
// the file's nonce is unchanged. A corrupt, truncated or tampered file, or a
// wrong key, gives an error that names the path and wraps ErrUnavailable;
// it is never read as an empty store.
type File struct {
	path    string // absolute
	keyPath string // absolute; empty when the key is in the keychain
	aead    cipher.AEAD
	keyID   [fileKeyIDSize]byte

	mu         sync.Mutex
	closed     bool
	lock       *os.File
	cache      *fileData
	cacheNonce [fileNonceSize]byte // the nonce of the file the cache was read from or written to
	cacheValid bool
}

// fileData is the plaintext JSON document.
type fileData struct {
	Version int                                     `json:"version"`
	Users   map[string]map[string]map[string][]byte `json:"users"` // user → extension → name → value
}

// OpenFile opens the encrypted store at path, creating it (and its key, see
// [FileOptions]) when it does not exist yet. It creates missing parent
// directories with mode 0700. It fails, with an error that names the path,
// when the store or key file is accessible to group or others, when the
// directory is writable by them, when the key is missing for an existing
// store or is the wrong key, and when the store file is corrupt. Opening
// waits at most 30 seconds for another process that holds the lock.
func OpenFile(path string, opts *FileOptions) (*File, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fileOpenTimeout)
	defer cancel()
	var o FileOptions
	if opts != nil {
		o.KeyFile, o.Keychain = opts.KeyFile, opts.Keychain
	}
	if path == "" {
		return nil, fmt.Errorf("%w: the secrets store path is empty", ErrInvalid)
	}
	if o.KeyFile != "" && o.Keychain != nil {
		return nil, fmt.Errorf("%w: set FileOptions.KeyFile or FileOptions.Keychain, not both", ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%w: resolving the secrets store path %q: %w", ErrInvalid, path, err)
	}
	f := &File{path: abs}
	if err := f.open(ctx, o); err != nil {
		if f.lock != nil {
			_ = f.lock.Close()
		}
		return nil, fmt.Errorf("opening secrets store %s: %w", abs, err)
	}
	return f, nil
}

// open does the work of OpenFile.
func (f *File) open(ctx context.Context, o FileOptions) error {
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: creating directory %s: %w", ErrUnavailable, dir, err)
	}
	if err := checkDir(dir); err != nil {
		return err
	}
	lock, err := os.OpenFile(f.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("%w: opening lock file: %w", ErrUnavailable, err)
	}
	f.lock = lock
	// Hold the lock while the key may be created, so that two processes
	// opening a new store agree on one key.
	if err := lockFile(ctx, f.lock); err != nil {
		return fmt.Errorf("%w: waiting for the lock %s: %w", ErrUnavailable, f.lock.Name(), err)
	}
	defer func() { _ = unlockFile(f.lock) }()

	_, err = os.Lstat(f.path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var key []byte
	if o.Keychain != nil {
		key, err = f.keychainKey(ctx, o.Keychain, exists)
	} else {
		f.keyPath = o.KeyFile
		if f.keyPath == "" {
			f.keyPath = f.path + ".key"
		}
		if f.keyPath, err = filepath.Abs(f.keyPath); err != nil {
			return fmt.Errorf("%w: resolving the key file path: %w", ErrInvalid, err)
		}
		key, err = f.fileKey(exists)
	}
	if err != nil {
		return err
	}
	defer clear(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		return fmt.Errorf("creating the cipher: %w", err)
	}
	if f.aead, err = cipher.NewGCM(block); err != nil {
		return fmt.Errorf("creating the cipher: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(fileKeyIDLabel))
	copy(f.keyID[:], mac.Sum(nil))
	_, err = f.load()
	return err
}

// keychainKey reads the store's key from the keychain, or creates it there
// for a new store.
func (f *File) keychainKey(ctx context.Context, kc *Keychain, exists bool) ([]byte, error) {
	key, err := kc.fileKey(ctx, f.path)
	switch {
	case err == nil:
		return key, nil
	case !errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("reading the store's key from the keychain: %w", err)
	case exists:
		return nil, fmt.Errorf("%w: the store file exists but keychain service %q holds no key for it: "+
			"restore the key item, or move the store away to start an empty one", ErrUnavailable, kc.Service())
	}
	key = make([]byte, fileKeySize)
	_, _ = rand.Read(key)
	if err := kc.setFileKey(ctx, f.path, key); err != nil {
		return nil, fmt.Errorf("storing the new store's key in the keychain: %w", err)
	}
	return key, nil
}

// fileKey reads the key file, or creates it for a new store.
func (f *File) fileKey(exists bool) ([]byte, error) {
	fh, err := os.Open(f.keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		if exists {
			return nil, fmt.Errorf("%w: key file %s is missing but the store exists: restore the key file "+
				"(a new key cannot decrypt the store), or move the store away to start an empty one", ErrUnavailable, f.keyPath)
		}
		return f.createKeyFile()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: opening key file: %w", ErrUnavailable, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: key file: %w", ErrUnavailable, err)
	}
	if err := checkPrivate(f.keyPath, fi, "key file"); err != nil {
		return nil, err
	}
	key, err := io.ReadAll(io.LimitReader(fh, fileKeySize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading key file %s: %w", ErrUnavailable, f.keyPath, err)
	}
	if len(key) != fileKeySize {
		clear(key)
		return nil, fmt.Errorf("%w: key file %s must hold exactly %d bytes", ErrUnavailable, f.keyPath, fileKeySize)
	}
	return key, nil
}

// createKeyFile writes a new random key with mode 0600.
func (f *File) createKeyFile() ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(f.keyPath), 0o700); err != nil {
		return nil, fmt.Errorf("%w: creating the key file's directory: %w", ErrUnavailable, err)
	}
	key := make([]byte, fileKeySize)
	_, _ = rand.Read(key)
	fh, err := os.OpenFile(f.keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: creating key file: %w", ErrUnavailable, err)
	}
	_, err = fh.Write(key)
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(filepath.Dir(f.keyPath))
	}
	if err != nil {
		_ = os.Remove(f.keyPath)
		return nil, fmt.Errorf("%w: writing key file %s: %w", ErrUnavailable, f.keyPath, err)
	}
	return key, nil
}

// checkDir refuses a directory that group or others may write to: they
// could replace the store or the key.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrUnavailable, dir)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: directory %s has mode %04o, which lets group or others write to it: run chmod 700 %s",
			ErrUnavailable, dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// checkPrivate refuses a store or key file that is not a regular file or
// that group or others may access.
func checkPrivate(path string, fi fs.FileInfo, what string) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s %s is not a regular file", ErrUnavailable, what, path)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s %s has mode %04o, which lets group or others access it: run chmod 600 %s",
			ErrUnavailable, what, path, fi.Mode().Perm(), path)
	}
	return nil
}

// load returns the store's contents: the cache when the file is unchanged,
// else the decrypted file. The caller holds f.mu. A missing file is an empty
// store. The returned data may be modified only under the flock, followed by
// save (or by invalidating the cache when save fails).
func (f *File) load() (*fileData, error) {
	fh, err := os.Open(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		f.cacheValid = false
		return &fileData{Version: fileVersion, Users: map[string]map[string]map[string][]byte{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := checkPrivate(f.path, fi, "store file"); err != nil {
		return nil, err
	}
	size := fi.Size()
	if size < int64(fileMinSize) {
		return nil, fmt.Errorf("%w: store file %s is truncated or corrupt: it has %d bytes, a valid store at least %d",
			ErrUnavailable, f.path, size, fileMinSize)
	}
	if size > fileMaxSize {
		return nil, fmt.Errorf("%w: store file %s is %d bytes long, more than the %d this store reads", ErrUnavailable, f.path, size, fileMaxSize)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(fh, buf[:filePrefixSize]); err != nil {
		return nil, fmt.Errorf("%w: reading store file %s: %w", ErrUnavailable, f.path, err)
	}
	if err := f.checkHeader(buf[:fileHeaderSize]); err != nil {
		return nil, err
	}
	nonce := buf[fileHeaderSize:filePrefixSize]
	if f.cacheValid && bytes.Equal(nonce, f.cacheNonce[:]) {
		return f.cache, nil
	}
	if _, err := io.ReadFull(fh, buf[filePrefixSize:]); err != nil {
		return nil, fmt.Errorf("%w: store file %s is truncated: %w", ErrUnavailable, f.path, err)
	}
	plain, err := f.aead.Open(nil, nonce, buf[filePrefixSize:], buf[:fileHeaderSize])
	if err != nil {
		return nil, fmt.Errorf("%w: store file %s failed authentication: it is corrupt or was tampered with", ErrUnavailable, f.path)
	}
	defer clear(plain)
	var d fileData
	if err := json.Unmarshal(plain, &d); err != nil || d.Version != fileVersion {
		// The error text could quote decrypted bytes, so it is left out.
		return nil, fmt.Errorf("%w: store file %s decrypted to a malformed document", ErrUnavailable, f.path)
	}
	if d.Users == nil {
		d.Users = map[string]map[string]map[string][]byte{}
	}
	f.dropCache()
	f.cache, f.cacheValid = &d, true
	copy(f.cacheNonce[:], nonce)
	return &d, nil
}

// checkHeader tells a foreign file, a newer format and a wrong key apart.
func (f *File) checkHeader(h []byte) error {
	switch {
	case string(h[:len(fileMagic)]) != fileMagic:
		return fmt.Errorf("%w: %s is not an agenthost secrets store (bad magic bytes)", ErrUnavailable, f.path)
	case h[len(fileMagic)] != fileVersion:
		return fmt.Errorf("%w: store file %s has format version %d, this build reads version %d", ErrUnavailable, f.path, h[len(fileMagic)], fileVersion)
	case !hmac.Equal(h[len(fileMagic)+1:], f.keyID[:]):
		where := "key file " + f.keyPath
		if f.keyPath == "" {
			where = "the keychain"
		}
		return fmt.Errorf("%w: store file %s was encrypted with a different key than the one in %s (wrong key)", ErrUnavailable, f.path, where)
	}
	return nil
}

// save encrypts d and replaces the store file with it, atomically. The
// caller holds f.mu and the flock.
func (f *File) save(d *fileData) error {
	plain, err := json.Marshal(d)
	if err != nil {
		f.cacheValid = false
		return fmt.Errorf("encoding the store: %w", err)
	}
	defer clear(plain)
	var header [fileHeaderSize]byte
	copy(header[:], fileMagic)
	header[len(fileMagic)] = fileVersion
	copy(header[len(fileMagic)+1:], f.keyID[:])
	var nonce [fileNonceSize]byte
	_, _ = rand.Read(nonce[:])
	out := make([]byte, 0, filePrefixSize+len(plain)+fileTagSize)
	out = append(out, header[:]...)
	out = append(out, nonce[:]...)
	out = f.aead.Seal(out, nonce[:], plain, header[:])
	if err := writeAtomic(f.path, out); err != nil {
		f.cacheValid = false
		return err
	}
	f.cache, f.cacheNonce, f.cacheValid = d, nonce, true
	return nil
}

// writeAtomic replaces path with data: temporary file in the same
// directory (mode 0600), fsync, rename, fsync of the directory.
func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%w: creating a temporary file next to %s: %w", ErrUnavailable, path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("%w: writing %s: %w", ErrUnavailable, tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("%w: syncing %s: %w", ErrUnavailable, tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%w: closing %s: %w", ErrUnavailable, tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("%w: replacing %s: %w", ErrUnavailable, path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("%w: syncing directory %s: %w", ErrUnavailable, dir, err)
	}
	return nil
}

// dropCache zeroes the cached secrets before the cache is replaced or
// dropped, so stale copies do not linger in memory.
func (f *File) dropCache() {
	if f.cache != nil {
		for _, exts := range f.cache.Users {
			for _, names := range exts {
				for _, v := range names {
					clear(v)
				}
			}
		}
	}
	f.cache, f.cacheValid = nil, false
}

// read runs fn on the current contents, under f.mu.
func (f *File) read(ctx context.Context, op func() string, fn func(*fileData) error) error {
	if err := ctx.Err(); err != nil {
		return wrapOp(op(), err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return wrapOp(op(), errClosed)
	}
	d, err := f.load()
	if err != nil {
		return wrapOp(op(), err)
	}
	return fn(d)
}

// update runs fn on the current contents under f.mu and the flock, and
// saves them when fn reports a change.
func (f *File) update(ctx context.Context, op string, fn func(*fileData) bool) error {
	if err := ctx.Err(); err != nil {
		return wrapOp(op, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return wrapOp(op, errClosed)
	}
	if err := lockFile(ctx, f.lock); err != nil {
		return wrapOp(op, fmt.Errorf("waiting for the lock %s: %w", f.lock.Name(), err))
	}
	defer func() { _ = unlockFile(f.lock) }()
	d, err := f.load()
	if err != nil {
		return wrapOp(op, err)
	}
	if !fn(d) {
		return nil
	}
	if err := f.save(d); err != nil {
		return wrapOp(op, err)
	}
	return nil
}

// Get implements [Store.Get].
func (f *File) Get(ctx context.Context, k Key) (Value, error) {
	if err := k.Validate(); err != nil {
		return Value{}, err
	}
	op := func() string { return "getting " + k.String() }
	var v Value
	err := f.read(ctx, op, func(d *fileData) error {
		b, ok := d.Users[k.User][k.Extension][k.Name]
		if !ok {
			return wrapOp(op(), ErrNotFound)
		}
		v = Value{s: string(b)}
		return nil
	})
	return v, err
}

// Set implements [Store.Set].
func (f *File) Set(ctx context.Context, k Key, v Value) error {
	if err := k.Validate(); err != nil {
		return err
	}
	if err := validateValue(v); err != nil {
		return err
	}
	return f.update(ctx, "setting "+k.String(), func(d *fileData) bool {
		exts := d.Users[k.User]
		if exts == nil {
			exts = map[string]map[string][]byte{}
			d.Users[k.User] = exts
		}
		names := exts[k.Extension]
		if names == nil {
			names = map[string][]byte{}
			exts[k.Extension] = names
		}
		names[k.Name] = []byte(v.s)
		return true
	})
}

// Delete implements [Store.Delete].
func (f *File) Delete(ctx context.Context, k Key) error {
	if err := k.Validate(); err != nil {
		return err
	}
	return f.update(ctx, "deleting "+k.String(), func(d *fileData) bool {
		exts := d.Users[k.User]
		names := exts[k.Extension]
		if _, ok := names[k.Name]; !ok {
			return false
		}
		delete(names, k.Name)
		if len(names) == 0 {
			delete(exts, k.Extension)
		}
		if len(exts) == 0 {
			delete(d.Users, k.User)
		}
		return true
	})
}

// List implements [Store.List].
func (f *File) List(ctx context.Context, extension, user string) ([]string, error) {
	if err := validateListArgs(extension, user); err != nil {
		return nil, err
	}
	var names []string
	op := func() string { return "listing the secrets of " + describeScope(extension, user) }
	err := f.read(ctx, op, func(d *fileData) error {
		names = slices.Sorted(maps.Keys(d.Users[user][extension]))
		return nil
	})
	return names, err
}

// DeleteUser implements [Store.DeleteUser].
func (f *File) DeleteUser(ctx context.Context, user string) error {
	if err := validatePart("key user", user, true); err != nil {
		return err
	}
	return f.update(ctx, "deleting the secrets of user "+describeUser(user), func(d *fileData) bool {
		if _, ok := d.Users[user]; !ok {
			return false
		}
		delete(d.Users, user)
		return true
	})
}

// Close implements [Store.Close]. It zeroes the decrypted copy it cached and
// closes the lock file.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.dropCache()
	if err := f.lock.Close(); err != nil {
		return fmt.Errorf("closing secrets store %s: %w", f.path, err)
	}
	return nil
}

// Path returns the absolute path of the store file.
func (f *File) Path() string { return f.path }
