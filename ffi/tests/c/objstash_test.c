/* The C ABI from C: a round trip of every call, bad input, threads, two processes.
   Built and run by ffi/tests/c/run.sh (./test.sh runs it); prints "N passed, N failed". */

#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "objstash.h"

static int passed, failed;

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (cond) {                                                                          \
      passed++;                                                                          \
    } else {                                                                             \
      failed++;                                                                          \
      fprintf(stderr, "%s:%d: failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              objstash_last_error());                                                    \
    }                                                                                    \
  } while (0)

#define OK(call) CHECK((call) == OBJSTASH_STATUS_OK)

static char dir[256];

static void path_in(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", dir, name);
}

static ObjstashBytes bytes_of(const char *s) {
  ObjstashBytes b = {(const uint8_t *)s, strlen(s)};
  return b;
}

static int buffer_is(ObjstashBuffer b, const char *s) {
  return b.data != NULL && b.len == strlen(s) && memcmp(b.data, s, b.len) == 0;
}

/* What objstash_read_model_each handed over: compared with the keys read_model gave. */
struct streamed {
  const ObjstashKey *expected;
  size_t n;
  size_t count;
  size_t mismatches;
  long stop_after; /* -1: never stop */
};

static int each_object(void *context, const ObjstashKey *key, const uint8_t *bytes, size_t len) {
  struct streamed *seen = context;
  ObjstashKey again;
  ObjstashBytes object = {bytes, len};
  if (seen->count >= seen->n || memcmp(key, &seen->expected[seen->count], sizeof *key) != 0 ||
      objstash_key_of(object, &again) != OBJSTASH_STATUS_OK ||
      memcmp(&again, key, sizeof again) != 0) {
    seen->mismatches++;
  }
  seen->count++;
  return seen->stop_after >= 0 && (long)seen->count >= seen->stop_after;
}

static void round_trip(void) {
  char path[512];
  path_in(path, sizeof path, "round.db");
  ObjstashStash *s = NULL;
  OK(objstash_open(path, NULL, &s));
  CHECK(s != NULL);

  /* Objects by key. */
  ObjstashKey key, again;
  OK(objstash_save(s, bytes_of("{\"wall\":17}"), &key));
  OK(objstash_key_of(bytes_of("{\"wall\":17}"), &again));
  CHECK(memcmp(key.bytes, again.bytes, 32) == 0);
  char hex[65];
  OK(objstash_key_to_hex(&key, hex));
  CHECK(strlen(hex) == 64);
  OK(objstash_key_from_hex(hex, &again));
  CHECK(memcmp(key.bytes, again.bytes, 32) == 0);
  ObjstashBuffer got;
  OK(objstash_get(s, &key, &got));
  CHECK(buffer_is(got, "{\"wall\":17}"));
  objstash_free(got.data);

  const char *texts[3] = {"a", "", "ccc"};
  ObjstashBytes objects[3];
  for (int i = 0; i < 3; i++) objects[i] = bytes_of(texts[i]);
  ObjstashKey keys[4];
  OK(objstash_save_all(s, objects, 3, keys));
  OK(objstash_key_of(bytes_of("never stored"), &keys[3]));
  ObjstashBuffer many[4];
  OK(objstash_get_many(s, keys, 4, many));
  CHECK(buffer_is(many[0], "a"));
  CHECK(many[1].data != NULL && many[1].len == 0); /* stored and empty is not absent */
  CHECK(buffer_is(many[2], "ccc"));
  CHECK(many[3].data == NULL && many[3].len == 0);
  objstash_free_buffers(many, 4);
  bool there = false, missing[4];
  OK(objstash_contains(s, &keys[0], &there));
  CHECK(there);
  OK(objstash_missing(s, keys, 4, missing));
  CHECK(!missing[0] && !missing[1] && !missing[2] && missing[3]);
  bool removed[2];
  OK(objstash_remove(s, &keys[2], 2, removed));
  CHECK(removed[0] && !removed[1]);
  OK(objstash_contains(s, &keys[2], &there));
  CHECK(!there);

  /* Names. */
  ObjstashBytes names[2] = {bytes_of("id-1"), bytes_of("id-2")};
  ObjstashBytes named[2] = {bytes_of("{\"one\":1}"), bytes_of("{\"two\":2}")};
  ObjstashKey named_keys[2];
  OK(objstash_save_named(s, names, named, 2, named_keys));
  ObjstashBuffer by_name[2];
  OK(objstash_get_named(s, names, 2, by_name));
  CHECK(buffer_is(by_name[0], "{\"one\":1}") && buffer_is(by_name[1], "{\"two\":2}"));
  objstash_free_buffers(by_name, 2);
  ObjstashKey resolved[2];
  bool found[2];
  OK(objstash_resolve(s, names, 2, resolved, found));
  CHECK(found[0] && memcmp(resolved[1].bytes, named_keys[1].bytes, 32) == 0);
  ObjstashBuffer *listed = NULL;
  ObjstashKey *listed_keys = NULL;
  size_t n_listed = 0;
  OK(objstash_names(s, &listed, &listed_keys, &n_listed));
  CHECK(n_listed == 2);
  objstash_free_buffers(listed, n_listed);
  objstash_free(listed);
  objstash_free(listed_keys);
  OK(objstash_remove_named(s, names, 1, removed));
  CHECK(removed[0]);

  /* Models. */
  ObjstashBytes members[3] = {bytes_of("m1"), bytes_of("m2"), bytes_of("m3")};
  ObjstashModel model;
  OK(objstash_save_model(s, bytes_of("{\"root\":1}"), members, 3, bytes_of("v1"), &model));
  CHECK(model.objects == 4 && model.missing == 0);
  CHECK(buffer_is(model.name, "v1"));
  objstash_free(model.name.data);
  ObjstashKey root = model.root;
  bool is_model = false;
  OK(objstash_model(s, &root, &model, &is_model));
  CHECK(is_model && model.missing == 0 && model.last_use_ms > 0);
  objstash_free(model.name.data);
  ObjstashKey *model_keys = NULL;
  ObjstashBuffer *model_objects = NULL;
  size_t n = 0;
  bool whole = false;
  OK(objstash_read_model(s, &root, &model_keys, &model_objects, &n, &whole));
  CHECK(whole && n == 4);
  /* The same model as a stream, in the same order; a callback that stops early. */
  struct streamed seen = {model_keys, n, 0, 0, -1};
  bool streamed_found = false;
  OK(objstash_read_model_each(s, &root, each_object, &seen, &streamed_found));
  CHECK(streamed_found && seen.count == n && seen.mismatches == 0);
  struct streamed stopped = {model_keys, n, 0, 0, 2};
  OK(objstash_read_model_each(s, &root, each_object, &stopped, &streamed_found));
  CHECK(streamed_found && stopped.count == 2);
  ObjstashKey nothing;
  OK(objstash_key_of(bytes_of("no model"), &nothing));
  OK(objstash_read_model_each(s, &nothing, each_object, &seen, &streamed_found));
  CHECK(!streamed_found);
  objstash_free_buffers(model_objects, n);
  objstash_free(model_objects);
  objstash_free(model_keys);
  OK(objstash_pin_model(s, &root, &found[0]));
  CHECK(found[0]);
  OK(objstash_unpin_model(s, &root, NULL));
  /* A member removed: the root reads as absent. */
  ObjstashKey m2;
  OK(objstash_key_of(members[1], &m2));
  OK(objstash_remove(s, &m2, 1, NULL));
  OK(objstash_get(s, &root, &got));
  CHECK(got.data == NULL);
  OK(objstash_declare_model(s, &root, &m2, 1, bytes_of(""), &model));
  objstash_free(model.name.data);
  CHECK(model.missing == 1);
  OK(objstash_save(s, members[1], &m2));
  OK(objstash_flush(s));
  OK(objstash_get(s, &root, &got));
  CHECK(buffer_is(got, "{\"root\":1}"));
  objstash_free(got.data);
  OK(objstash_remove_model(s, &root, &found[0]));
  CHECK(found[0]);

  /* Reports, the cap, close. */
  ObjstashStats stats;
  OK(objstash_stats(s, &stats));
  CHECK(stats.objects >= 3 && stats.file_bytes > 0);
  ObjstashVerify report;
  OK(objstash_verify(s, &report));
  CHECK(report.ok && report.checked == stats.objects);
  CHECK(report.text.data != NULL);
  objstash_free(report.text.data);
  /* The counters: this handle's reads and the stash's; a reset counts from then. */
  ObjstashCounters mine, all;
  OK(objstash_counters(s, true, &mine));
  CHECK(mine.hits > 0 && mine.misses > 0 && mine.saved > 0 && mine.since_unix_ms > 0);
  OK(objstash_counters(s, false, &all));
  CHECK(all.hits == mine.hits && all.misses == mine.misses && all.saved == mine.saved);
  OK(objstash_reset_counters(s));
  OK(objstash_get(s, &root, &got)); /* its model was removed */
  CHECK(got.data == NULL);
  OK(objstash_counters(s, false, &all));
  CHECK(all.hits == 0 && all.misses == 1 && all.saved == 0);
  OK(objstash_set_max_size(s, 1 << 30));
  uint64_t evicted_objects = 0;
  OK(objstash_trim_to(s, 1 << 30, &evicted_objects, NULL));
  bool read_only = true;
  OK(objstash_is_read_only(s, &read_only));
  CHECK(!read_only);
  OK(objstash_close(s));
  OK(objstash_close(s)); /* twice is fine */
  CHECK(objstash_get(s, &key, &got) == OBJSTASH_STATUS_CLOSED);
  CHECK(strstr(objstash_last_error(), "closed") != NULL);
  objstash_free_handle(s);

  /* Reopened read-only: it reads and refuses saves. */
  ObjstashOptions ro = {0};
  ro.read_only = true;
  OK(objstash_open(path, &ro, &s));
  OK(objstash_get(s, &key, &got));
  CHECK(buffer_is(got, "{\"wall\":17}"));
  objstash_free(got.data);
  CHECK(objstash_save(s, bytes_of("x"), &again) == OBJSTASH_STATUS_READ_ONLY);
  objstash_free_handle(s);
  ObjstashBuffer text = {0};
  bool lost = true;
  OK(objstash_repair(path, &text, &lost));
  CHECK(!lost && text.data != NULL);
  objstash_free(text.data);
  CHECK(strlen(objstash_version()) > 0);
}

static void bad_input(void) {
  char path[512], other[512];
  path_in(path, sizeof path, "bad.db");
  ObjstashStash *s = NULL;
  ObjstashKey key;
  ObjstashBuffer got;
  CHECK(objstash_open(NULL, NULL, &s) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  CHECK(objstash_open(path, NULL, NULL) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  ObjstashOptions bad = {0};
  bad.codec = 7;
  CHECK(objstash_open(path, &bad, &s) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(objstash_last_error(), "codec") != NULL);
  ObjstashOptions must = {0};
  must.must_exist = true;
  CHECK(objstash_open(path, &must, &s) == OBJSTASH_STATUS_NOT_FOUND);
  /* A file that is not a stash is left alone. */
  path_in(other, sizeof other, "notes.txt");
  FILE *f = fopen(other, "w");
  fputs("not a database, just notes\n", f);
  fclose(f);
  CHECK(objstash_open(other, NULL, &s) == OBJSTASH_STATUS_NOT_A_STASH);
  CHECK(objstash_key_from_hex("abc", &key) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  CHECK(objstash_key_from_hex(NULL, &key) == OBJSTASH_STATUS_INVALID_ARGUMENT);

  OK(objstash_open(path, NULL, &s));
  CHECK(objstash_save(NULL, bytes_of("x"), &key) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  CHECK(objstash_save(s, bytes_of("x"), NULL) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  ObjstashBytes null_data = {NULL, 5};
  CHECK(objstash_save(s, null_data, &key) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  CHECK(objstash_get(s, NULL, &got) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  CHECK(objstash_get_many(s, NULL, 3, &got) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  CHECK(objstash_save_all(s, NULL, 0, NULL) == OBJSTASH_STATUS_OK); /* nothing is fine */
  ObjstashBytes empty_name = bytes_of("");
  ObjstashBytes obj = bytes_of("x");
  CHECK(objstash_save_named(s, &empty_name, &obj, 1, NULL) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  /* Nothing of a refused call was stored. */
  ObjstashStats stats;
  OK(objstash_stats(s, &stats));
  CHECK(stats.objects == 0);
  OK(objstash_close(s));
  CHECK(objstash_flush(s) == OBJSTASH_STATUS_CLOSED);
  objstash_free_handle(s);
  objstash_free_handle(NULL);
  objstash_free(NULL);
}

#define THREADS 8
#define PER_THREAD 500

struct work {
  ObjstashStash *s;
  int id;
  int errors;
};

static void *thread_main(void *arg) {
  struct work *w = arg;
  char text[64];
  for (int i = 0; i < PER_THREAD; i++) {
    snprintf(text, sizeof text, "{\"thread\":%d,\"i\":%d}", w->id, i);
    ObjstashKey key;
    ObjstashBuffer got;
    if (objstash_save(w->s, bytes_of(text), &key) != OBJSTASH_STATUS_OK ||
        objstash_get(w->s, &key, &got) != OBJSTASH_STATUS_OK || !buffer_is(got, text)) {
      w->errors++;
    }
    objstash_free(got.data);
  }
  return NULL;
}

static void threads(void) {
  char path[512];
  path_in(path, sizeof path, "threads.db");
  ObjstashStash *s = NULL;
  OK(objstash_open(path, NULL, &s));
  pthread_t t[THREADS];
  struct work w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (struct work){s, i, 0};
    pthread_create(&t[i], NULL, thread_main, &w[i]);
  }
  int errors = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    errors += w[i].errors;
  }
  CHECK(errors == 0);
  ObjstashStats stats;
  OK(objstash_stats(s, &stats));
  CHECK(stats.objects == THREADS * PER_THREAD);
  OK(objstash_close(s));
  objstash_free_handle(s);
}

static void two_processes(void) {
  char path[512];
  path_in(path, sizeof path, "shared.db");
  ObjstashStash *s = NULL;
  OK(objstash_open(path, NULL, &s));
  pid_t child = fork();
  if (child == 0) {
    /* The child opens the stash itself and saves its own objects. */
    ObjstashStash *mine = NULL;
    int bad = objstash_open(path, NULL, &mine) != OBJSTASH_STATUS_OK;
    char text[64];
    for (int i = 0; i < 1000 && !bad; i++) {
      snprintf(text, sizeof text, "{\"child\":%d}", i);
      ObjstashKey key;
      bad |= objstash_save(mine, bytes_of(text), &key) != OBJSTASH_STATUS_OK;
    }
    bad |= objstash_close(mine) != OBJSTASH_STATUS_OK;
    _exit(bad);
  }
  char text[64];
  for (int i = 0; i < 1000; i++) {
    snprintf(text, sizeof text, "{\"parent\":%d}", i);
    ObjstashKey key;
    OK(objstash_save(s, bytes_of(text), &key));
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  OK(objstash_flush(s));
  /* Every object of both processes, in one read. */
  ObjstashKey keys[2];
  OK(objstash_key_of(bytes_of("{\"child\":999}"), &keys[0]));
  OK(objstash_key_of(bytes_of("{\"parent\":999}"), &keys[1]));
  bool missing[2] = {true, true};
  OK(objstash_missing(s, keys, 2, missing));
  CHECK(!missing[0] && !missing[1]);
  ObjstashStats stats;
  OK(objstash_stats(s, &stats));
  CHECK(stats.objects == 2000);
  OK(objstash_close(s));
  objstash_free_handle(s);
}

/* A root as Speckle's V2 serializer writes it: a child reference's null closure, a reused
   reference's own map, then the root's own closure last (with a legacy blob id). */
static void closure(void) {
  const char *root =
      "{\"id\":\"r\",\"@elements\":[{\"speckle_type\":\"reference\",\"referencedId\":\"a\","
      "\"__closure\":null},{\"speckle_type\":\"reference\",\"referencedId\":\"m\","
      "\"__closure\":{\"q\":1}}],\"__closure\":{\"m\":1,\"a\":1,\"blob:9f\":1,\"q\":2}}";
  ObjstashBuffer *ids = NULL;
  size_t n = 99;
  OK(objstash_closure_ids(bytes_of(root), &ids, &n));
  CHECK(n == 3 && ids != NULL);
  if (n == 3 && ids != NULL) {
    CHECK(buffer_is(ids[0], "a") && buffer_is(ids[1], "m") && buffer_is(ids[2], "q"));
  }
  objstash_free_buffers(ids, n);
  objstash_free(ids);
  ids = (ObjstashBuffer *)1;
  OK(objstash_closure_ids(bytes_of("{\"leaf\":true}"), &ids, &n));
  CHECK(n == 0 && ids == NULL);
  CHECK(objstash_closure_ids(bytes_of("[1]"), &ids, &n) == OBJSTASH_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(objstash_last_error(), "JSON") != NULL);
  CHECK(objstash_closure_ids(bytes_of("{\"__closure\":[1]}"), &ids, &n) ==
        OBJSTASH_STATUS_INVALID_ARGUMENT);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/objstash-c-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  round_trip();
  bad_input();
  threads();
  two_processes();
  closure();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
