/* The released dialect's component settings (3.9.0): what the server holds as each component's
 * current settings, from the metadata sessions register (initial settings) and the updates
 * processes report, with the events that tell the settings streams (gs_stream.c). The rules are
 * 3.9.0's graphserver.py: a process's value wins over the metadata's until the process leaves,
 * when the metadata's initial value comes back. */
#include "graph/gs_settings.h"
#include "graph/gs_stream.h"

#include <stdlib.h>
#include <string.h>

struct gs_setting {
  char *address;
  ezi_pk_doc *doc; /* keeps the documents `value` points into */
  ezi_m39_settings_value value;
  char session[37]; /* the session whose metadata has the component ("": none) */
  /* with a session: its metadata's initial value, which comes back when a process's goes */
  ezi_pk_doc *init_doc;
  ezi_m39_settings_value init;
  char process[37]; /* the process that reported the value ("": none) */
};

static gs_setting *find(server *s, const char *address) {
  for (size_t i = 0; i < s->n_settings; i++)
    if (!strcmp(s->settings[i].address, address)) return &s->settings[i];
  return NULL;
}

static void setting_free(gs_setting *g) {
  free(g->address);
  ezi_pk_doc_free(g->doc);
  ezi_pk_doc_free(g->init_doc);
}

static void remove_at(server *s, gs_setting *g) {
  setting_free(g);
  *g = s->settings[--s->n_settings];
}

/* Sets *dst to v, kept through a new document (*slot) holding src. 0 or EZ_ENOMEM (nothing
 * changed). */
static int keep_value(ezi_pk_doc **slot, ezi_m39_settings_value *dst,
                      const ezi_m39_settings_value *v, ezi_pk_doc *src) {
  ezi_pk_doc *d = ezi_pk_doc_new();
  if (!d || ezi_pk_doc_keep(d, src)) {
    ezi_pk_doc_free(d);
    return EZ_ENOMEM;
  }
  ezi_pk_doc_free(*slot);
  *slot = d;
  *dst = *v;
  return 0;
}

static int set_value(gs_setting *g, const ezi_m39_settings_value *v, ezi_pk_doc *src) {
  return keep_value(&g->doc, &g->value, v, src);
}

/* g's component is in session `id`'s metadata, with initial value v (in src). */
static void set_session(gs_setting *g, const char *id, const ezi_m39_settings_value *v,
                        ezi_pk_doc *src) {
  if (keep_value(&g->init_doc, &g->init, v, src)) return; /* no session then: as if it had none */
  memcpy(g->session, id, 37);
}

static void clear_session(gs_setting *g) {
  g->session[0] = 0;
  ezi_pk_doc_free(g->init_doc);
  g->init_doc = NULL;
}

/* The setting of `address`, made if there is none (NULL when out of memory). */
static gs_setting *get(server *s, const char *address) {
  gs_setting *g = find(s, address);
  if (g) return g;
  if (s->n_settings == s->cap_settings) {
    size_t cap = s->cap_settings ? s->cap_settings * 2 : 16;
    gs_setting *v = realloc(s->settings, cap * sizeof *v);
    if (!v) return NULL;
    s->settings = v;
    s->cap_settings = cap;
  }
  g = &s->settings[s->n_settings];
  *g = (gs_setting){.address = strdup(address)};
  if (!g->address) return NULL;
  s->n_settings++;
  return g;
}

void ezi_gs_settings_session_meta(server *s, const char *session, const ezi_pk *meta,
                                  ezi_pk_doc *doc) {
  size_t n = 0;
  if (!meta || ezi_m39_meta_check(meta, &n, NULL)) return;
  for (size_t i = 0; i < n; i++) {
    ezi_m39_component comp;
    if (ezi_m39_meta_component(meta, i, &comp, NULL)) continue;
    ezi_m39_settings_value v;
    ezi_m39_initial_settings(&comp, &v);
    gs_setting *g = find(s, comp.address);
    if (g && g->process[0]) { /* a process's value stands; the metadata now names it */
      set_session(g, session, &v, doc);
    } else if ((g = get(s, comp.address)) && set_value(g, &v, doc) == 0) {
      set_session(g, session, &v, doc);
      g->process[0] = 0;
    }
    ezi_gs_settings_event(s, EZI_M39_INITIAL_SETTINGS, comp.address, &v, doc, session, NULL, NULL);
  }
}

void ezi_gs_settings_session_gone(server *s, const char *session) {
  for (size_t i = 0; i < s->n_settings;) {
    gs_setting *g = &s->settings[i];
    if (strcmp(g->session, session)) {
      i++;
    } else if (!g->process[0]) {
      remove_at(s, g); /* (the last one moved here: look at i again) */
    } else {
      clear_session(g);
      i++;
    }
  }
}

int ezi_gs_settings_process_update(server *s, const char *process, const ezi_m39_settings_update *u,
                                   ezi_pk_doc *doc) {
  ezi_m39_settings_value v;
  if (ezi_m39_parse(doc, &EZI_M39_SETTINGS_SNAPSHOT_VALUE, u->value, &v, NULL)) {
    EZI_WARN("graph server: process %s reported settings of %.200s that are not a "
             "SettingsSnapshotValue",
             process, u->component_address);
    return EZ_EPROTO;
  }
  gs_setting *g = get(s, u->component_address); /* (its session: the one whose metadata has it) */
  if (!g || set_value(g, &v, doc)) return EZ_ENOMEM;
  memcpy(g->process, process, 37);
  ezi_gs_settings_event(s, EZI_M39_SETTINGS_UPDATED, g->address, &v, doc,
                        g->session[0] ? g->session : NULL, process, &u->timestamp);
  return 0;
}

void ezi_gs_settings_process_gone(server *s, const char *process) {
  for (size_t i = 0; i < s->n_settings;) {
    gs_setting *g = &s->settings[i];
    if (strcmp(g->process, process)) {
      i++;
      continue;
    }
    if (!g->session[0] || set_value(g, &g->init, g->init_doc)) {
      remove_at(s, g);
      continue;
    }
    g->process[0] = 0;
    ezi_gs_settings_event(s, EZI_M39_SETTINGS_UPDATED, g->address, &g->init, g->init_doc,
                          g->session, NULL, NULL);
    i++;
  }
}

static int by_address(const void *a, const void *b) {
  return strcmp((*(const gs_setting *const *)a)->address, (*(const gs_setting *const *)b)->address);
}

int ezi_gs_settings_snapshot(server *s, uint8_t **out, size_t *len) {
  size_t n = s->n_settings;
  const gs_setting **order = malloc((n ? n : 1) * sizeof *order);
  const char **keys = malloc((n ? n : 1) * sizeof *keys);
  ezi_m39_settings_value *vals = malloc((n ? n : 1) * sizeof *vals);
  ezi_pk_doc *d = ezi_pk_doc_new();
  int rc = order && keys && vals && d ? 0 : EZ_ENOMEM;
  for (size_t i = 0; !rc && i < n; i++)
    order[i] = &s->settings[i];
  if (!rc) qsort(order, n, sizeof *order, by_address);
  for (size_t i = 0; !rc && i < n; i++) {
    keys[i] = order[i]->address;
    vals[i] = order[i]->value;
    rc = ezi_pk_doc_keep(d, order[i]->doc);
  }
  ezi_pk *dict = NULL;
  if (!rc) rc = ezi_m39_build_dict(d, &EZI_M39_SETTINGS_SNAPSHOT_VALUE, keys, vals, n, &dict, NULL);
  if (!rc) rc = ezi_pk_dump(dict, 0, NULL, out, len, NULL);
  ezi_pk_doc_free(d);
  free(order);
  free(keys);
  free(vals);
  return rc;
}

void ezi_gs_settings_free(server *s) {
  for (size_t i = 0; i < s->n_settings; i++)
    setting_free(&s->settings[i]);
  free(s->settings);
  s->settings = NULL;
  s->n_settings = s->cap_settings = 0;
}
