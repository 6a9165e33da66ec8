/* An endpoint's profile document, checked by yajl's callbacks (profentry.h). */
#include "proto/profentry.h"
#include "base/internal.h"
#include "proto/dag.h" /* ezi_utf8_valid */

#include <string.h>
#include <yajl/yajl_parse.h>

enum { K_NONE, K_TYPE, K_DIALECT, K_TOPIC, K_PUB_ID };

typedef struct walk {
  ezi_prof_entry *e;
  int depth;       /* objects and arrays open */
  int key;         /* K_*: the top-level key whose value comes next */
  unsigned seen;   /* bit per K_*: the top-level keys met */
  const char *why; /* what broke the rules (the callback that found it returns 0) */
  bool began;      /* the first value was seen */
  yajl_handle h;
  size_t end; /* the offset after the object's closing brace */
} walk;

static int fail(walk *w, const char *why) {
  w->why = why;
  return 0;
}

/* A string's or key's decoded bytes: jansson refuses a NUL in them (\u0000), and UTF-8 that is
 * not strict, where yajl lets encoded surrogates pass. */
static int text_ok(walk *w, const unsigned char *s, size_t n) {
  if (memchr(s, 0, n)) return fail(w, "a string holds \\u0000");
  if (!ezi_utf8_valid((const char *)s, n)) return fail(w, "a string is not UTF-8");
  for (const unsigned char *p = s, *end = s + n; (p = memchr(p, 0xed, (size_t)(end - p)));)
    if (++p < end && *p >= 0xa0) return fail(w, "a string holds an encoded surrogate");
  return 1;
}

/* Any value: at the top level, the first must be the object. */
static int value(walk *w) {
  if (!w->began) return fail(w, "not an object");
  return 1;
}

/* A scalar value (the top-level key it belongs to, if any, is done). */
static int scalar(walk *w) {
  if (!value(w)) return 0;
  if (w->depth == 1) w->key = K_NONE;
  return 1;
}

static int on_null(void *ctx) { return scalar(ctx); }
static int on_bool(void *ctx, int b) {
  (void)b;
  return scalar(ctx);
}
static int on_int(void *ctx, long long v) {
  (void)v;
  return scalar(ctx);
}
static int on_double(void *ctx, double v) {
  (void)v;
  return scalar(ctx);
}

static int on_string(void *ctx, const unsigned char *s, size_t n) {
  walk *w = ctx;
  if (!text_ok(w, s, n) || !value(w)) return 0;
  if (w->depth == 1) {
    if (w->key == K_TYPE)
      w->e->type = n == 9 && !memcmp(s, "publisher", 9) ? EZI_PE_PUBLISHER
                   : n == 7 && !memcmp(s, "channel", 7) ? EZI_PE_CHANNEL
                                                        : EZI_PE_OTHER;
    if (w->key == K_PUB_ID && n < sizeof w->e->pub_id) {
      memcpy(w->e->pub_id, s, n);
      w->e->pub_id[n] = 0;
    }
    w->key = K_NONE;
  }
  return 1;
}

/* An object or array opens. */
static int open_one(walk *w, bool object) {
  if (!w->began) {
    if (!object) return fail(w, "not an object");
    w->began = true;
  } else if (w->depth == 0) {
    return fail(w, "more than one value");
  }
  if (w->depth == 1) w->key = K_NONE; /* (a top-level key's value is this container) */
  if (++w->depth > EZI_PE_MAX_DEPTH) return fail(w, "nested too deep");
  return 1;
}

static int on_start_map(void *ctx) { return open_one(ctx, true); }
static int on_start_array(void *ctx) { return open_one(ctx, false); }
static int on_end(void *ctx) {
  walk *w = ctx;
  if (--w->depth == 0) w->end = yajl_get_bytes_consumed(w->h);
  return 1;
}

/* Only JSON's white space from p on (yajl lets an unfinished token after the value pass). */
static bool blank(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != ' ' && p[i] != '\t' && p[i] != '\n' && p[i] != '\r') return false;
  return true;
}

static int on_key(void *ctx, const unsigned char *s, size_t n) {
  walk *w = ctx;
  if (!text_ok(w, s, n)) return 0;
  if (w->depth != 1) return 1;
  static const char *const names[] = {NULL, "type", "dialect", "topic", "pub_id"};
  w->key = K_NONE;
  for (int k = K_TYPE; k <= K_PUB_ID; k++)
    if (strlen(names[k]) == n && !memcmp(s, names[k], n)) w->key = k;
  if (w->key == K_NONE) return 1;
  if (w->seen & (1u << w->key)) return fail(w, "a key it names twice");
  w->seen |= 1u << w->key;
  if (w->key == K_DIALECT) w->e->has_dialect = true;
  if (w->key == K_TOPIC) w->e->has_topic = true;
  return 1;
}

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_bool,
    .yajl_integer = on_int, /* (so that yajl converts integers and reals, refusing overflows) */
    .yajl_double = on_double,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_key,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

static int hex4(const char *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/* In JSON that parsed, a backslash only starts an escape within a string: each \u escape of a
 * surrogate must be a high one followed by a low one (yajl decodes an unpaired one; jansson
 * refuses it). */
static bool surrogates_paired(const char *p, size_t n) {
  for (const char *end = p + n; (p = memchr(p, '\\', (size_t)(end - p))) != NULL;) {
    if (end - p < 2) return true;
    if (p[1] != 'u' || end - p < 6) {
      p += 2;
      continue;
    }
    int v = hex4(p + 2);
    p += 6;
    if (v >= 0xdc00 && v <= 0xdfff) return false;
    if (v >= 0xd800 && v <= 0xdbff) {
      int lo = end - p >= 6 && p[0] == '\\' && p[1] == 'u' ? hex4(p + 2) : -1;
      if (lo < 0xdc00 || lo > 0xdfff) return false;
      p += 6;
    }
  }
  return true;
}

int ezi_prof_entry_check(const char *text, size_t n, ezi_prof_entry *out, const char **why) {
  *out = (ezi_prof_entry){0};
  walk w = {.e = out};
  const char *msg = NULL;
  yajl_handle h = yajl_alloc(&callbacks, NULL, &w);
  if (!h) return EZ_ENOMEM;
  w.h = h;
  yajl_status st = yajl_parse(h, (const unsigned char *)text, n);
  if (st == yajl_status_ok) st = yajl_complete_parse(h);
  yajl_free(h);
  if (st != yajl_status_ok)
    msg = w.why ? w.why : "not JSON";
  else if (!w.began)
    msg = "not an object";
  else if (!blank(text + w.end, n - w.end))
    msg = "more after the object";
  else if (memchr(text, '\v', n) || memchr(text, '\f', n)) /* (yajl's white space, not JSON's) */
    msg = "a form feed or vertical tab";
  else if (!surrogates_paired(text, n))
    msg = "an unpaired surrogate escape";
  if (why) *why = msg;
  if (msg) return EZ_EPROTO;
  const char *b = memchr(text, '{', n); /* (only white space may precede it) */
  out->brace = (size_t)(b - text);
  return 0;
}
