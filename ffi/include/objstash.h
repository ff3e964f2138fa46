/* objstash: a content-addressed object cache in one SQLite file, from C.

   Generated from ffi/src by cbindgen: do not edit. Conventions (ffi/src/lib.rs): every
   call returns an ObjstashStatus (OBJSTASH_STATUS_OK is 0; else objstash_last_error()
   says why, for this thread); a handle may be used by many threads at once; everything
   the library returns is malloc'ed and released with objstash_free. */

#ifndef OBJSTASH_H
#define OBJSTASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// What a call did.
typedef enum ObjstashStatus {
  // Done.
  OBJSTASH_STATUS_OK = 0,
  // A null pointer where one was needed, a key that is not 64 hex digits, a setting
  // out of range: nothing was done.
  OBJSTASH_STATUS_INVALID_ARGUMENT = 1,
  // The handle was closed.
  OBJSTASH_STATUS_CLOSED = 2,
  // There is no stash at the path (and the options did not allow creating one).
  OBJSTASH_STATUS_NOT_FOUND = 3,
  // The file is not a stash (not SQLite, or another application's database).
  OBJSTASH_STATUS_NOT_A_STASH = 4,
  // A stored object failed its check, or the file is damaged: see `objstash_repair`.
  OBJSTASH_STATUS_CORRUPT = 5,
  // The operation needs every other handle closed, or another process owns the stash.
  OBJSTASH_STATUS_LOCKED = 6,
  // Another process held the write lock past the busy timeout; nothing was lost.
  OBJSTASH_STATUS_BUSY = 7,
  // The handle only reads.
  OBJSTASH_STATUS_READ_ONLY = 8,
  // An object larger than the stash's limit; nothing of the call was stored.
  OBJSTASH_STATUS_TOO_LARGE = 9,
  // A setting the stash does not allow, or a newer format.
  OBJSTASH_STATUS_SETTINGS = 10,
  // The writer stopped; writes since the last flush may be lost.
  OBJSTASH_STATUS_WRITER_STOPPED = 11,
  // The file system failed.
  OBJSTASH_STATUS_IO = 12,
  // The disk is full; reads go on, `objstash_trim_to` gives space back.
  OBJSTASH_STATUS_DISK_FULL = 13,
  // SQLite failed.
  OBJSTASH_STATUS_DATABASE = 14,
  // A defect: the library panicked. The handle may be unusable.
  OBJSTASH_STATUS_PANIC = 15,
  // Any other failure (the message says).
  OBJSTASH_STATUS_OTHER = 16,
} ObjstashStatus;

// An open stash (opaque).
typedef struct ObjstashStash ObjstashStash;

// How to open a stash. Zero everywhere (`{0}`) means: the recorded settings, or the
// defaults for a new stash, created if absent.
typedef struct ObjstashOptions {
  // 0 the recorded (or single), 1 single, 2 bucketed: fixed when a stash is made.
  int32_t layout;
  // 0 the recorded (or fast), 1 fast, 2 safe, 3 owned.
  int32_t durability;
  // 0 the recorded (or gzip), 1 gzip, 2 zstd-dict.
  int32_t codec;
  // 0 where the stash keeps them (rows for a new one), 1 rows, 2 a file beside it.
  int32_t values;
  // A size cap in bytes to record; 0 leaves the recorded one.
  uint64_t max_size;
  // Bytes of the database file each read connection may map into memory (SQLite's
  // `mmap_size`, at most about 2 GiB): a read then finds its pages in the OS page
  // cache with no system call. 0: the library's default (a small file whole, a file of
  // values' database whole). Speckle's own cache maps 30 GB.
  uint64_t read_map_bytes;
  // Only read (and never create).
  bool read_only;
  // Fail with `OBJSTASH_STATUS_NOT_FOUND` rather than create a stash that is not there.
  bool must_exist;
  // Record a durability or codec that differs from the recorded one (else that is
  // `OBJSTASH_STATUS_SETTINGS`).
  bool reconfigure;
  // Evict objects used moments ago too (no grace period): for tests and one-off trims.
  bool no_eviction_grace;
} ObjstashOptions;

// Bytes the caller lends for a call: `data` may be null only when `len` is 0.
typedef struct ObjstashBytes {
  const uint8_t *data;
  size_t len;
} ObjstashBytes;

// An object's key: 32 bytes.
typedef struct ObjstashKey {
  uint8_t bytes[32];
} ObjstashKey;

// Bytes the library returns: allocated with `malloc`, released with `objstash_free(data)`.
// A null `data` (with `len` 0) owns nothing: an object not stored, a name not given.
typedef struct ObjstashBuffer {
  uint8_t *data;
  size_t len;
} ObjstashBuffer;

// A model as the stash reports it. `name` is a buffer of the library's (free its `data`
// with `objstash_free`), `{NULL, 0}` when the model has none.
typedef struct ObjstashModel {
  struct ObjstashKey root;
  struct ObjstashBuffer name;
  // Objects it lists, its root included.
  uint64_t objects;
  // Of those, how many are not stored: while any is, the root reads as absent.
  uint64_t missing;
  uint64_t stored_bytes;
  // Milliseconds since 1970 of its last use; -1 if none is known.
  int64_t last_use_ms;
  bool pinned;
} ObjstashModel;

// Called by [`objstash_read_model_each`] for each object of a model: `key` and the
// `len` bytes at `bytes` are borrowed for the call only. Returns 0 to go on, anything
// else to stop.
typedef int32_t (*ObjstashModelObjectFn)(void *context,
                                         const struct ObjstashKey *key,
                                         const uint8_t *bytes,
                                         size_t len);

// The size report.
typedef struct ObjstashStats {
  uint64_t objects;
  uint64_t raw_bytes;
  uint64_t stored_bytes;
  // Bytes of the stash's files on disk.
  uint64_t file_bytes;
  uint64_t names;
  // The size cap in bytes; 0 for none.
  uint64_t max_size;
  uint64_t pinned_objects;
  uint64_t evicted_objects;
  uint64_t evicted_bytes;
} ObjstashStats;

// What a stash served since counting began (`objstash_counters`).
typedef struct ObjstashCounters {
  // Milliseconds since the Unix epoch when counting began; 0 if it never has.
  uint64_t since_unix_ms;
  // Keys read and served (from the stash or through its remote).
  uint64_t hits;
  // Keys read and found nowhere.
  uint64_t misses;
  // Of the hits, keys read through the remote, and their bytes.
  uint64_t read_throughs;
  uint64_t read_through_bytes;
  // Keys looked up (`objstash_contains`, `objstash_missing`) that were stored, and not.
  uint64_t found;
  uint64_t absent;
  // Objects saved that were new, and saves of objects already stored.
  uint64_t saved;
  uint64_t saved_again;
  // Objects evicted since counting began, and their stored bytes (0 for a handle).
  uint64_t evicted;
  uint64_t evicted_bytes;
} ObjstashCounters;

// What `objstash_verify` found. `text` is the report in words (free its `data` with
// `objstash_free`).
typedef struct ObjstashVerify {
  // Nothing is wrong.
  bool ok;
  uint64_t checked;
  // Objects that failed their check.
  uint64_t corrupt;
  // Intact objects the key index cannot find (a repair brings them back).
  uint64_t unreachable;
  // Damage beyond single rows: the file needs `objstash_repair`.
  uint64_t problems;
  struct ObjstashBuffer text;
} ObjstashVerify;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Opens (or creates) the stash at `path` (UTF-8) with `options` (null: the defaults);
// `*out` is the handle, to be closed with `objstash_close` and released with
// `objstash_free_handle`.
enum ObjstashStatus objstash_open(const char *path,
                                  const struct ObjstashOptions *options,
                                  struct ObjstashStash **out);

// Flushes and closes the stash; later calls on the handle answer `OBJSTASH_STATUS_CLOSED`.
// Closing twice is fine. Waits for calls under way on other threads.
enum ObjstashStatus objstash_close(struct ObjstashStash *handle);

// Releases the handle (closing it first if it is open, its failure then lost: close it
// first to see it). Null is ignored. No thread may use the handle during or after.
void objstash_free_handle(struct ObjstashStash *handle);

// Whether the handle only reads (`*out`).
enum ObjstashStatus objstash_is_read_only(const struct ObjstashStash *handle, bool *out);

// The key `data` would be stored under, computed without storing it.
enum ObjstashStatus objstash_key_of(struct ObjstashBytes data, struct ObjstashKey *out);

// The key spelled by `hex` (64 hex digits, NUL-terminated); `OBJSTASH_STATUS_INVALID_ARGUMENT`
// for anything else.
enum ObjstashStatus objstash_key_from_hex(const char *hex, struct ObjstashKey *out);

// Writes the 64 hex digits of `key` and a NUL into `out` (65 bytes).
enum ObjstashStatus objstash_key_to_hex(const struct ObjstashKey *key, char *out);

// Releases what the library returned: a buffer's `data`, an array. Null is ignored.
void objstash_free(void *ptr);

// Releases the `data` of each of `n` buffers at `buffers` (not the array itself, which
// is the caller's unless the library returned it: then `objstash_free` it too).
void objstash_free_buffers(struct ObjstashBuffer *buffers, size_t n);

// Saves a model: its `n` members, then its root, as one assembly, and declares it under
// `name` (`{NULL, 0}` for none); `*out` the model (may be null).
enum ObjstashStatus objstash_save_model(const struct ObjstashStash *handle,
                                        struct ObjstashBytes root,
                                        const struct ObjstashBytes *members,
                                        size_t n,
                                        struct ObjstashBytes name,
                                        struct ObjstashModel *out);

// Declares `root` a model of `n` member keys (the root need not be listed, nor any of them
// stored yet), under `name` (`{NULL, 0}` for none); `*out` the model (may be null).
enum ObjstashStatus objstash_declare_model(const struct ObjstashStash *handle,
                                           const struct ObjstashKey *root,
                                           const struct ObjstashKey *members,
                                           size_t n,
                                           struct ObjstashBytes name,
                                           struct ObjstashModel *out);

// The model of `root`: `*out_found`, and `*out` when found (complete when `missing` is 0).
enum ObjstashStatus objstash_model(const struct ObjstashStash *handle,
                                   const struct ObjstashKey *root,
                                   struct ObjstashModel *out,
                                   bool *out_found);

// Pins the model of `root`: never evicted. `*out_found` (may be null): whether there is one.
enum ObjstashStatus objstash_pin_model(const struct ObjstashStash *handle,
                                       const struct ObjstashKey *root,
                                       bool *out_found);

// Unpins the model of `root` (a use now).
enum ObjstashStatus objstash_unpin_model(const struct ObjstashStash *handle,
                                         const struct ObjstashKey *root,
                                         bool *out_found);

// Removes the model of `root`: its root and every object no other model lists.
enum ObjstashStatus objstash_remove_model(const struct ObjstashStash *handle,
                                          const struct ObjstashKey *root,
                                          bool *out_found);

// Every object of the complete model of `root`, root included, in the order the file
// holds them (one sweep), each checked: `*out_keys` and `*out_objects` arrays of `*out_n`
// from the library (free the objects with `objstash_free_buffers`, then both arrays with
// `objstash_free`); `*out_found` false (and nothing allocated) when `root` is no complete
// model.
enum ObjstashStatus objstash_read_model(const struct ObjstashStash *handle,
                                        const struct ObjstashKey *root,
                                        struct ObjstashKey **out_keys,
                                        struct ObjstashBuffer **out_objects,
                                        size_t *out_n,
                                        bool *out_found);

// Streams the complete model of `root`: `callback(context, key, bytes, len)` for each of
// its objects, root included, in the order the file holds them, each checked, a chunk at
// a time (memory stays bounded however large the model), on the calling thread, all from
// one snapshot (exactly the model that was complete when the call began). `*out_found`
// false (and no call) when `root` is no complete model. A non-zero return from the
// callback stops the stream; the call then returns `OBJSTASH_STATUS_OK`.
// `OBJSTASH_STATUS_CORRUPT` for an object that does not check (the objects before it were
// handed over).
enum ObjstashStatus objstash_read_model_each(const struct ObjstashStash *handle,
                                             const struct ObjstashKey *root,
                                             ObjstashModelObjectFn callback,
                                             void *context,
                                             bool *out_found);

// The ids the JSON object `json` lists in its own `"__closure"`, by Speckle's rules
// (`objstash::closure_ids`: the top-level object's field only, whatever its children's
// references carry; blob ids left out; sorted, each once): `*out_ids` an array of `*out_n`
// buffers from the library (free each with `objstash_free_buffers`, then the array with
// `objstash_free`), null with `*out_n` 0 when it lists none.
// `OBJSTASH_STATUS_INVALID_ARGUMENT` if `json` is not a JSON object or its `"__closure"` is
// neither an object nor null.
enum ObjstashStatus objstash_closure_ids(struct ObjstashBytes json,
                                         struct ObjstashBuffer **out_ids,
                                         size_t *out_n);

// Stores `n` objects under `n` names (a name saved again points to its new object);
// their keys into `out_keys[n]` (may be null).
enum ObjstashStatus objstash_save_named(const struct ObjstashStash *handle,
                                        const struct ObjstashBytes *names,
                                        const struct ObjstashBytes *objects,
                                        size_t n,
                                        struct ObjstashKey *out_keys);

// The objects saved under `n` names into `out[n]` (`{NULL, 0}` where none is), read in
// one snapshot, each checked.
enum ObjstashStatus objstash_get_named(const struct ObjstashStash *handle,
                                       const struct ObjstashBytes *names,
                                       size_t n,
                                       struct ObjstashBuffer *out);

// The object saved under one name (`len` bytes at `name`): `*out` a buffer to
// `objstash_free`, or `{NULL, 0}` when none is. The call a loop of single reads makes
// (no array to marshal).
enum ObjstashStatus objstash_get_one_named(const struct ObjstashStash *handle,
                                           const uint8_t *name,
                                           size_t len,
                                           struct ObjstashBuffer *out);

// Whether one name (`len` bytes at `name`) maps to an object that is stored (`*out`): a
// name whose object is gone, or whose object is the root of a model that misses objects,
// answers false.
enum ObjstashStatus objstash_has_one_named(const struct ObjstashStash *handle,
                                           const uint8_t *name,
                                           size_t len,
                                           bool *out);

// The keys `n` names map to into `out_keys[n]`, and whether each is saved into
// `out_found[n]`.
enum ObjstashStatus objstash_resolve(const struct ObjstashStash *handle,
                                     const struct ObjstashBytes *names,
                                     size_t n,
                                     struct ObjstashKey *out_keys,
                                     bool *out_found);

// Removes `n` names (their objects stay) in one transaction; `out_removed[n]` (may be
// null) whether each was saved.
enum ObjstashStatus objstash_remove_named(const struct ObjstashStash *handle,
                                          const struct ObjstashBytes *names,
                                          size_t n,
                                          bool *out_removed);

// Every name and the key it maps to, for a listing (`GetAllObjects`): `*out_names` an
// array of `*out_n` buffers and `*out_keys` one of keys, both from the library (free each
// name with `objstash_free_buffers`, then both arrays with `objstash_free`).
enum ObjstashStatus objstash_names(const struct ObjstashStash *handle,
                                   struct ObjstashBuffer **out_names,
                                   struct ObjstashKey **out_keys,
                                   size_t *out_n);

// Stores an object; `*out_key` its key. Every read from every thread sees it once this
// returns; `objstash_flush` commits it.
enum ObjstashStatus objstash_save(const struct ObjstashStash *handle,
                                  struct ObjstashBytes data,
                                  struct ObjstashKey *out_key);

// Stores `n` objects, hashed and compressed in parallel; their keys into `out_keys[n]`,
// in order.
enum ObjstashStatus objstash_save_all(const struct ObjstashStash *handle,
                                      const struct ObjstashBytes *objects,
                                      size_t n,
                                      struct ObjstashKey *out_keys);

// The object under `key`, checked against it: `*out` a buffer to `objstash_free`, or
// `{NULL, 0}` when it is not stored.
enum ObjstashStatus objstash_get(const struct ObjstashStash *handle,
                                 const struct ObjstashKey *key,
                                 struct ObjstashBuffer *out);

// The objects under `n` keys into `out[n]` (each to `objstash_free`, or `{NULL, 0}` when
// not stored; `objstash_free_buffers` frees them all), read in one snapshot and checked in
// parallel: many times faster than a loop of `objstash_get`.
enum ObjstashStatus objstash_get_many(const struct ObjstashStash *handle,
                                      const struct ObjstashKey *keys,
                                      size_t n,
                                      struct ObjstashBuffer *out);

// Whether an object is stored under `key` (`*out`).
enum ObjstashStatus objstash_contains(const struct ObjstashStash *handle,
                                      const struct ObjstashKey *key,
                                      bool *out);

// Which of `n` keys are not stored: `out_missing[i]` for `keys[i]`, in one call.
enum ObjstashStatus objstash_missing(const struct ObjstashStash *handle,
                                     const struct ObjstashKey *keys,
                                     size_t n,
                                     bool *out_missing);

// Removes `n` objects (and their names) in one transaction; `out_removed[i]` whether
// `keys[i]` was stored (the array may be null).
enum ObjstashStatus objstash_remove(const struct ObjstashStash *handle,
                                    const struct ObjstashKey *keys,
                                    size_t n,
                                    bool *out_removed);

// Returns once everything saved and removed before is committed.
enum ObjstashStatus objstash_flush(const struct ObjstashStash *handle);

// Records a size cap in bytes (0: none); eviction down to it runs in the background.
enum ObjstashStatus objstash_set_max_size(const struct ObjstashStash *handle, uint64_t max_size);

// Evicts least recently used objects and models until the files fit `max_size` bytes
// (works on a full disk too); `*out_objects` and `*out_bytes` (each may be null) what went.
enum ObjstashStatus objstash_trim_to(const struct ObjstashStash *handle,
                                     uint64_t max_size,
                                     uint64_t *out_objects,
                                     uint64_t *out_bytes);

// The size report into `*out` (waits for pending writes to commit).
enum ObjstashStatus objstash_stats(const struct ObjstashStash *handle, struct ObjstashStats *out);

// The counters into `*out`: the stash's (every process's calls; this handle's are
// committed first), or with `this_handle` this handle's since it opened.
enum ObjstashStatus objstash_counters(const struct ObjstashStash *handle,
                                      bool this_handle,
                                      struct ObjstashCounters *out);

// Sets the stash's counters to 0; counting begins now.
enum ObjstashStatus objstash_reset_counters(const struct ObjstashStash *handle);

// Reads and checks every object and name into `*out`.
enum ObjstashStatus objstash_verify(const struct ObjstashStash *handle, struct ObjstashVerify *out);

// Checks the stash at `path` (UTF-8; no handle may have it open) and rebuilds it from
// every object that verifies if anything is wrong; `*out_text` (may be null) the report in
// words, to `objstash_free`; `*out_lost` (may be null) whether objects or names were lost
// (the damaged file is then kept beside it).
enum ObjstashStatus objstash_repair(const char *path,
                                    struct ObjstashBuffer *out_text,
                                    bool *out_lost);

// The message of this thread's last failing call (empty if none failed): valid until
// this thread's next failing call. Never null; not to be freed.
const char *objstash_last_error(void);

// The library's version, as text. Never null; not to be freed.
const char *objstash_version(void);

// Every named object, as UTF-16 text (invalid UTF-8 replaced by U+FFFD, as .NET's decoder
// does): `*out_text` holds the code units of every name and object one after another
// (native byte order; `len` counts bytes), and `*out_spans` (4 × `*out_n` integers) where
// each entry's name and object are: code-unit offset and length of the name, then of the
// object. Names whose object is not stored (removed since, or the root of an incomplete
// model) are left out. Free both with `objstash_free`.
enum ObjstashStatus objstash_named_texts(const struct ObjstashStash *handle,
                                         struct ObjstashBuffer *out_text,
                                         uint64_t **out_spans,
                                         size_t *out_n);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* OBJSTASH_H */
