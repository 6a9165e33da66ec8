/* The graph server's list of registered clients and the X_SUB_INFO frame (gsregistry.h). */
#include "proto/gsregistry.h"

#include "proto/dag.h"
#include "base/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of s to send: at most EZI_SUBINFO_HANDLE, not cutting a UTF-8 sequence. */
static size_t handle_len(const char *s) {
  size_t n = strlen(s);
  if (n <= EZI_SUBINFO_HANDLE) return n;
  n = EZI_SUBINFO_HANDLE;
  while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
    n--;
  return n;
}

int ezi_subinfo_encode(ezi_buf *b, int64_t pid, const char *handle) {
  static const char hex[] = "0123456789abcdef";
  char head[32];
  int k = snprintf(head, sizeof head, "%c%lld:", (char)EZI_X_SUB_INFO, (long long)pid);
  size_t n = handle ? handle_len(handle) : 0;
  if (ezi_buf_reserve(b, (size_t)k + 2 * n + 1)) return EZ_ENOMEM;
  ezi_buf_put(b, head, (size_t)k);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)handle[i];
    char two[2] = {hex[c >> 4], hex[c & 15]};
    ezi_buf_put(b, two, 2);
  }
  ezi_buf_put_u8(b, '\n');
  return 0;
}

static int nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool ezi_subinfo_decode(const char *p, size_t n, int64_t *pid, char **handle) {
  size_t i = 0;
  int64_t v = 0;
  for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
    if (v > (INT64_MAX - 9) / 10) return false;
    v = v * 10 + (p[i] - '0');
  }
  if (i == 0 || i >= n || p[i] != ':') return false;
  i++;
  size_t hn = n - i;
  if (hn % 2 || hn / 2 > EZI_SUBINFO_HANDLE) return false;
  char *h = malloc(hn / 2 + 1);
  if (!h) return false;
  for (size_t k = 0; k < hn / 2; k++) {
    int hi = nibble(p[i + 2 * k]), lo = nibble(p[i + 2 * k + 1]);
    if (hi < 0 || lo < 0) {
      free(h);
      return false;
    }
    h[k] = (char)(hi << 4 | lo);
  }
  h[hn / 2] = 0;
  /* The handle goes into JSON: UTF-8 without NUL only. */
  if (!ezi_utf8_valid(h, hn / 2) || strlen(h) != hn / 2) {
    free(h);
    return false;
  }
  free(*handle);
  *handle = h;
  *pid = v;
  return true;
}

json_t *ezi_gs_registry_json(const ezi_gs_client *v, size_t n) {
  json_t *reg = json_object(), *pubs = json_array(), *subs = json_array();
  if (!reg || !pubs || !subs) {
    json_decref(reg);
    json_decref(pubs);
    json_decref(subs);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    const ezi_gs_client *c = &v[i];
    json_t *o = json_object();
    if (!o) continue;
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "topic", json_string(c->topic ? c->topic : ""));
    json_object_set_new(o, "host", json_string(c->host ? c->host : ""));
    if (c->is_pub) {
      json_object_set_new(o, "port", json_integer(c->port));
    } else {
      if (c->pid > 0) json_object_set_new(o, "pid", json_integer((json_int_t)c->pid));
      if (c->handle) json_object_set_new(o, "handle", json_string(c->handle));
    }
    json_array_append_new(c->is_pub ? pubs : subs, o);
  }
  json_object_set_new(reg, "publishers", pubs);
  json_object_set_new(reg, "subscribers", subs);
  return reg;
}
