/* The released dialect's component settings (3.9.0): what the server holds as each component's
 * current settings, from the metadata sessions register (initial settings) and the updates
 * processes report, with the events that tell the settings streams (gs_stream.c). The rules are
 * 3.9.0's graphserver.py: a process's value wins over the metadata's until the process leaves,
 * when the metadata's initial value comes back. */
#include "graph/gs_released.h"

#include <stdlib.h>
#include <string.h>

struct gs_setting {
  char *address;
  ezi_pk_doc *doc; /* keeps the documents `value` points into */
  ezi_m39_settings_value value;
  char session[37]; /* the session whose metadata has the component ("": none) */
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
}

static void remove_at(server *s, gs_setting *g) {
  setting_free(g);
  *g = s->settings[--s->n_settings];
}

/* Sets g's value (kept through a new document holding src). 0 or EZ_ENOMEM (g unchanged). */
static int set_value(gs_setting *g, const ezi_m39_settings_value *v, ezi_pk_doc *src) {
  ezi_pk_doc *d = ezi_pk_doc_new();
  if (!d || ezi_pk_doc_keep(d, src)) {
    ezi_pk_doc_free(d);
    return EZ_ENOMEM;
  }
  ezi_pk_doc_free(g->doc);
  g->doc = d;
  g->value = *v;
  return 0;
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

void ezi_gs_settings_session_meta(server *s, conn *c) {
  const ezi_pk *meta = ezi_gs_session_meta(c);
  ezi_pk_doc *doc = ezi_gs_session_meta_doc(c);
  size_t n = 0;
  if (!meta || ezi_m39_meta_check(meta, &n, NULL)) return;
  for (size_t i = 0; i < n; i++) {
    ezi_m39_component comp;
    if (ezi_m39_meta_component(meta, i, &comp, NULL)) continue;
    ezi_m39_settings_value v;
    ezi_m39_initial_settings(&comp, &v);
    gs_setting *g = find(s, comp.address);
    if (g && g->process[0]) { /* a process's value stands; the metadata now names it */
      memcpy(g->session, c->id, 37);
    } else if ((g = get(s, comp.address)) && set_value(g, &v, doc) == 0) {
      memcpy(g->session, c->id, 37);
      g->process[0] = 0;
    }
    ezi_gs_settings_event(s, EZI_M39_INITIAL_SETTINGS, comp.address, &v, doc, c->id, NULL, NULL);
  }
}

void ezi_gs_settings_session_gone(server *s, conn *c) {
  for (size_t i = 0; i < s->n_settings;) {
    gs_setting *g = &s->settings[i];
    if (strcmp(g->session, c->id)) {
      i++;
    } else if (!g->process[0]) {
      remove_at(s, g); /* (the last one moved here: look at i again) */
    } else {
      g->session[0] = 0;
      i++;
    }
  }
}

int ezi_gs_settings_process_update(server *s, conn *proc, const ezi_m39_settings_update *u,
                                   ezi_pk_doc *doc) {
  if (!ezi_gs_process_owns(proc, u->component_address)) {
    EZI_WARN("graph server: process %s reported settings of %.200s, which it does not own",
             proc->id, u->component_address);
    return EZ_EPROTO;
  }
  ezi_m39_settings_value v;
  if (ezi_m39_parse(doc, &EZI_M39_SETTINGS_SNAPSHOT_VALUE, u->value, &v, NULL)) {
    EZI_WARN("graph server: process %s reported settings of %.200s that are not a "
             "SettingsSnapshotValue",
             proc->id, u->component_address);
    return EZ_EPROTO;
  }
  conn *owner = ezi_gs_session_of_component(s, u->component_address);
  gs_setting *g = get(s, u->component_address);
  if (!g || set_value(g, &v, doc)) return EZ_ENOMEM;
  if (owner) memcpy(g->session, owner->id, 37); /* else the one it had */
  memcpy(g->process, proc->id, 37);
  ezi_gs_settings_event(s, EZI_M39_SETTINGS_UPDATED, g->address, &v, doc,
                        g->session[0] ? g->session : NULL, proc->id, &u->timestamp);
  return 0;
}

void ezi_gs_settings_process_gone(server *s, conn *proc) {
  for (size_t i = 0; i < s->n_settings;) {
    gs_setting *g = &s->settings[i];
    if (strcmp(g->process, proc->id)) {
      i++;
      continue;
    }
    conn *sess = NULL;
    for (conn *k = s->conns; k && g->session[0]; k = k->next)
      if (k->st == C_SESSION && !strcmp(k->id, g->session)) sess = k;
    ezi_m39_component comp;
    const ezi_pk *meta = sess ? ezi_gs_session_meta(sess) : NULL;
    if (!meta || ezi_m39_meta_find(meta, g->address, &comp, NULL)) {
      remove_at(s, g);
      continue;
    }
    ezi_m39_settings_value v;
    ezi_m39_initial_settings(&comp, &v);
    if (set_value(g, &v, ezi_gs_session_meta_doc(sess))) {
      remove_at(s, g);
      continue;
    }
    g->process[0] = 0;
    ezi_gs_settings_event(s, EZI_M39_SETTINGS_UPDATED, g->address, &v,
                          ezi_gs_session_meta_doc(sess), g->session, NULL, NULL);
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
