/* `ezmsg list` and `ezmsg info TOPIC`: the graph's topics and their endpoints, from the graph view
 * (graphview.h), as a table or as JSON. */
#include "cli.h"
#include "graphview.h"
#include "jsonout.h"
#include "textfit.h"

#include <stdlib.h>
#include <string.h>

enum { OPT_JSON = 3000, OPT_NAMES };

static const struct option json_opts[] = {{"json", no_argument, NULL, OPT_JSON}, {0}};
static const struct option list_opts[] = {
    {"json", no_argument, NULL, OPT_JSON}, {"names", no_argument, NULL, OPT_NAMES}, {0}};

static const cli_spec list_spec = {
    .name = "list",
    .args = "",
    .about = "Lists every topic with its publishers and subscribers, idle ones included: each\n"
             "endpoint's process id, host, transport and buffer count, and the rate each topic\n"
             "receives over the last 2 s. Against an ezmsg-c graph server, a subscriber no\n"
             "publisher feeds is listed too (a Python server does not report those).",
    .max_args = 0,
    .opts = list_opts,
    .opts_help = "      --json         the graph view as one JSON document (docs/dashboard.md)\n"
                 "      --names        only the topic names, one a line (for scripts)\n",
};

static const cli_spec info_spec = {
    .name = "info",
    .args = "TOPIC",
    .about = "Describes one topic: its rate, the topics it feeds and is fed by, and every\n"
             "publisher and subscriber on it with their rates, backpressure and processing times.",
    .min_args = 1,
    .max_args = 1,
    .opts = json_opts,
    .opts_help = "      --json         as one JSON document\n",
};

typedef struct list_args {
  bool json, names;
} list_args;

static int json_flag(int opt, const char *arg, void *user) {
  (void)arg;
  list_args *a = user;
  if (opt == OPT_JSON)
    a->json = true;
  else if (opt == OPT_NAMES)
    a->names = true;
  else
    return -1;
  return 0;
}

static void print_doc(json_t *doc) {
  char *text = doc ? jo_dumps(doc, true) : NULL;
  if (text) puts(text);
  free(text);
  json_decref(doc);
}

/* ---- list ------------------------------------------------------------------------------------ */

#define NAME_W 30

static void pid_str(char out[24], int64_t pid) {
  if (pid > 0)
    snprintf(out, 24, "%lld", (long long)pid);
  else
    snprintf(out, 24, "-");
}

static void rate_str(char out[24], double r, bool known) {
  if (known)
    snprintf(out, 24, "%.1f", r);
  else
    snprintf(out, 24, "-");
}

static void endpoint_row(const char *kind, const char *label, int64_t pid, const char *host,
                         const char *transport, uint64_t nbuf, double rate, bool rate_known) {
  char name[4 * NAME_W + 16], h[4 * 15 + 1], p[24], b[24], r[24], lab[4 * NAME_W + 1];
  cli_fit(lab, label, NAME_W - 6, false);
  snprintf(name, sizeof name, "  %s %s", kind, lab);
  char padded[4 * NAME_W + 16];
  cli_fit(padded, name, NAME_W, true);
  cli_fit(h, host ? host : "-", 15, true);
  pid_str(p, pid);
  if (nbuf)
    snprintf(b, sizeof b, "%llu", (unsigned long long)nbuf);
  else
    snprintf(b, sizeof b, "-");
  rate_str(r, rate, rate_known);
  printf("%s %8s  %s  %-9s %7s %10s\n", padded, p, h, transport, b, r);
}

static void print_list(const gv *v, const char *addr) {
  size_t idle = 0;
  for (size_t i = 0; i < v->n_subs; i++)
    idle += v->subs[i].n_chans == 0;
  printf("graph server %s: %zu topic%s, %zu publisher%s, %zu subscriber%s (%zu idle)\n", addr,
         v->n_topics, v->n_topics == 1 ? "" : "s", v->n_pubs, v->n_pubs == 1 ? "" : "s", v->n_subs,
         v->n_subs == 1 ? "" : "s", idle);
  char head[4 * NAME_W + 1];
  cli_fit(head, "TOPIC / ENDPOINT", NAME_W, true);
  printf("%s %8s  %-15s  %-9s %7s %10s\n", head, "PID", "HOST", "TRANSPORT", "BUFFERS", "MSG/S");
  for (size_t t = 0; t < v->n_topics; t++) {
    const gv_topic *tp = &v->topics[t];
    char name[4 * NAME_W + 1], r[24];
    cli_fit(name, tp->name, NAME_W, true);
    rate_str(r, tp->rate_hz, v->has_profile);
    printf("%s %8s  %-15s  %-9s %7s %10s\n", name, "", "", "", "", r);
    for (size_t i = 0; i < v->n_pubs; i++) {
      const gv_pub *p = &v->pubs[i];
      if (p->topic_ix != t) continue;
      char id[12];
      snprintf(id, sizeof id, "%.8s", p->id ? p->id : "?");
      endpoint_row("pub", id, p->pid, p->host, p->answered ? "-" : "(silent)", p->num_buffers,
                   p->rate_hz, p->answered);
    }
    for (size_t i = 0; i < v->n_subs; i++) {
      const gv_sub *s = &v->subs[i];
      if (s->topic_ix != t) continue;
      endpoint_row("sub", s->handle ? s->handle : s->id, s->pid, s->host, s->mode, s->num_buffers,
                   s->rate_hz, s->n_chans > 0);
    }
  }
  if (!v->has_profile) puts("(this graph server gives no profile: topics and edges only)");
}

int cmd_list(int argc, char **argv) {
  list_args a = {0};
  cli_ctx ctx;
  int rc = cli_parse(&list_spec, argc, argv, &ctx, json_flag, &a);
  if (rc >= 0) return rc;
  if (a.json && a.names)
    return cli_usage_error(&list_spec, "--json and --names exclude each other");
  gv v;
  rc = gv_fetch(ctx.address, EZ_PROFILE_WINDOW_S, ctx.timeout_ms, &v);
  if (rc) return cli_fail(&ctx, rc, "list");
  if (a.names)
    for (size_t i = 0; i < v.n_topics; i++)
      puts(v.topics[i].name);
  else if (a.json)
    print_doc(gv_json(&v));
  else
    print_list(&v, ctx.shown);
  gv_free(&v);
  return 0;
}

/* ---- info ------------------------------------------------------------------------------------ */

/* The view's JSON cut down to one topic. */
static json_t *topic_json(const gv *v, const gv_topic *t) {
  json_t *all = gv_json(v);
  if (!all) return NULL;
  json_t *doc = json_object();
  json_object_set(doc, "timestamp", json_object_get(all, "timestamp"));
  json_object_set(doc, "window_s", json_object_get(all, "window_s"));
  size_t ix = (size_t)(t - v->topics);
  json_object_set(doc, "topic", json_array_get(json_object_get(all, "topics"), ix));
  json_t *from = json_array();
  for (size_t i = 0; i < v->n_topics; i++)
    for (size_t k = 0; k < v->topics[i].n_to; k++)
      if (v->topics[i].to[k] == ix) json_array_append_new(from, json_string(v->topics[i].name));
  json_object_set_new(doc, "from", from);
  const char *keys[] = {"publishers", "channels", "subscribers"};
  for (int k = 0; k < 3; k++) {
    json_t *src = json_object_get(all, keys[k]), *dst = json_array(), *e;
    size_t i;
    json_array_foreach(src, i, e) {
      const char *tp = json_string_value(json_object_get(e, "topic"));
      if (tp && !strcmp(tp, t->name)) json_array_append(dst, e);
    }
    json_object_set_new(doc, keys[k], dst);
  }
  json_decref(all);
  return doc;
}

static void lat_line(const char *what, const ez_latency *l) {
  printf("      %s ms: avg %.3f  p99 %.3f  max %.3f  (%llu samples, %llu in flight)\n", what,
         l->avg_ms, l->p99_ms, l->max_ms, (unsigned long long)l->samples,
         (unsigned long long)l->in_flight);
}

static void print_info(const gv *v, const gv_topic *t) {
  size_t ix = (size_t)(t - v->topics);
  printf("topic %s\n", t->name);
  if (v->has_profile)
    printf("  receives %.1f msg/s, %.3f MB/s (over %.1f s)\n", t->rate_hz, t->bytes_per_s / 1e6,
           v->window_s);
  printf("  fed by:");
  size_t n = 0;
  for (size_t i = 0; i < v->n_topics; i++)
    for (size_t k = 0; k < v->topics[i].n_to; k++)
      if (v->topics[i].to[k] == ix) printf("%s %s", n++ ? "," : "", v->topics[i].name);
  printf("%s\n  feeds:", n ? "" : " (no topic)");
  for (size_t k = 0; k < t->n_to; k++)
    printf("%s %s", k ? "," : "", v->topics[t->to[k]].name);
  printf("%s\n", t->n_to ? "" : " (no topic)");
  printf("  publishers: %zu\n", t->n_pubs);
  for (size_t i = 0; i < v->n_pubs; i++) {
    const gv_pub *p = &v->pubs[i];
    if (p->topic_ix != ix) continue;
    printf("    %s  pid %lld  host %s\n", p->id ? p->id : "?", (long long)p->pid,
           p->host ? p->host : "?");
    if (!p->answered) {
      puts("      (registered; did not answer the profile in time)");
      continue;
    }
    printf("      %.1f msg/s  %.3f MB/s  num_buffers %llu  channels %llu  sent %llu\n", p->rate_hz,
           p->bytes_per_s / 1e6, (unsigned long long)p->num_buffers,
           (unsigned long long)p->num_channels, (unsigned long long)p->messages_total);
    lat_line("backpressure", &p->bp);
    if (p->bottleneck[0]) printf("      BOTTLENECK: %s\n", p->bottleneck);
  }
  printf("  subscribers: %zu\n", t->n_subs);
  for (size_t i = 0; i < v->n_subs; i++) {
    const gv_sub *s = &v->subs[i];
    if (s->topic_ix != ix) continue;
    char pid[24];
    pid_str(pid, s->pid);
    printf("    %s  id %s  pid %s  host %s\n", s->handle ? s->handle : "(no handle)",
           s->id ? s->id : "?", pid, s->host ? s->host : "?");
    if (!s->n_chans) {
      puts("      idle: no publisher feeds it");
      continue;
    }
    printf("      %.1f msg/s  transport %s  channels %zu\n", s->rate_hz, s->mode, s->n_chans);
    lat_line("processing", &s->proc);
    if (s->bottleneck[0]) printf("      BOTTLENECK: %s\n", s->bottleneck);
  }
}

int cmd_info(int argc, char **argv) {
  list_args la = {0};
  cli_ctx ctx;
  int rc = cli_parse(&info_spec, argc, argv, &ctx, json_flag, &la);
  bool json = la.json;
  if (rc >= 0) return rc;
  gv v;
  rc = gv_fetch(ctx.address, EZ_PROFILE_WINDOW_S, ctx.timeout_ms, &v);
  if (rc) return cli_fail(&ctx, rc, "info");
  const gv_topic *t = gv_find_topic(&v, ctx.argv[0]);
  if (!t) {
    const char **names = calloc(v.n_topics + 1, sizeof *names);
    for (size_t i = 0; names && i < v.n_topics; i++)
      names[i] = v.topics[i].name;
    const char *near = names ? cli_closest(ctx.argv[0], names, v.n_topics) : NULL;
    fprintf(stderr, "ezmsg info: no topic %s in the graph at %s%s%s%s\n", ctx.argv[0], ctx.shown,
            near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
    free(names);
    gv_free(&v);
    return 1;
  }
  if (json)
    print_doc(topic_json(&v, t));
  else
    print_info(&v, t);
  gv_free(&v);
  return 0;
}
