/* The graph view drawn as Graphviz dot or a Mermaid flowchart (`ezmsg graphviz`, `ezmsg mermaid`):
 * topics (rounded boxes) with the topic graph's edges between them; each process a cluster
 * holding its publishers (ellipses), channels (small diamonds, labelled with their transport) and
 * subscribers (ellipses). A publisher points at its topic; a topic points (dotted) at each
 * subscriber of it; data flows publisher -> channel -> subscriber. */
#include "gvdraw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A label: printable characters only (control characters become '?'); for dot, '"' and '\'
 * escaped; for Mermaid, '"' as #quot;. */
static void label(FILE *f, const char *s, bool mermaid) {
  for (const unsigned char *p = (const unsigned char *)(s ? s : "?"); *p; p++) {
    if (*p < 0x20 || *p == 0x7f)
      fputc('?', f);
    else if (*p == '"')
      fputs(mermaid ? "#quot;" : "\\\"", f);
    else if (*p == '\\' && !mermaid)
      fputs("\\\\", f);
    else if (mermaid && (*p == '<' || *p == '>'))
      fputs(*p == '<' ? "#lt;" : "#gt;", f);
    else
      fputc(*p, f);
  }
}

static const char *nl(bool mermaid) { return mermaid ? "<br>" : "\\n"; }

/* Node names: dot uses the topic itself for topics (so `"/a" -> "/b"` reads as the topic graph)
 * and "pub:N" / "chan:N" / "sub:N" for endpoints; Mermaid needs plain ids: tN, pN, cN, sN. */
static void topic_id(FILE *f, const gv *v, size_t t, bool mermaid) {
  if (mermaid) {
    fprintf(f, "t%zu", t);
  } else {
    fputc('"', f);
    label(f, v->topics[t].name, false);
    fputc('"', f);
  }
}

static void node_id(FILE *f, char kind, size_t i, bool mermaid) {
  if (mermaid)
    fprintf(f, "%c%zu", kind, i);
  else
    fprintf(f, "\"%s:%zu\"", kind == 'p' ? "pub" : kind == 'c' ? "chan" : "sub", i);
}

static void open_node(FILE *f, char kind, size_t i, bool mermaid, const char *indent) {
  fputs(indent, f);
  node_id(f, kind, i, mermaid);
  if (mermaid)
    fputs(kind == 'c' ? "{{\"" : "([\"", f);
  else
    fputs(" [label=\"", f);
}

static void close_node(FILE *f, char kind, bool mermaid, bool mark) {
  if (mermaid) {
    fputs(kind == 'c' ? "\"}}\n" : "\"])\n", f);
    return;
  }
  if (kind == 'c')
    fputs("\", shape=diamond, fontsize=9, style=filled, fillcolor=\"#eeeeee\"];\n", f);
  else
    fprintf(f, "\", shape=ellipse%s];\n", mark ? ", color=red, penwidth=2" : "");
}

static bool in_proc(const gv_proc *pr, int64_t pid, const char *host) {
  return pr->pid == pid && ((!pr->host && !host) || (pr->host && host && !strcmp(pr->host, host)));
}

static void draw_proc(FILE *f, const gv *v, size_t k, bool mermaid) {
  const gv_proc *pr = &v->procs[k];
  const char *ind = "    ";
  if (mermaid) {
    fprintf(f, "  subgraph proc%zu[\"", k);
  } else {
    fprintf(f, "  subgraph \"cluster_%zu\" {\n    label=\"", k);
  }
  if (pr->pid > 0)
    fprintf(f, "pid %lld @ ", (long long)pr->pid);
  else
    fputs("process unknown @ ", f);
  label(f, pr->host ? pr->host : "?", mermaid);
  fputs(mermaid ? "\"]\n" : "\";\n    style=rounded; color=\"#888888\";\n", f);
  for (size_t i = 0; i < v->n_pubs; i++) {
    const gv_pub *p = &v->pubs[i];
    if (!in_proc(pr, p->pid, p->host)) continue;
    open_node(f, 'p', i, mermaid, ind);
    fputs("pub ", f);
    label(f, p->topic, mermaid);
    if (p->answered)
      fprintf(f, "%s%.1f msg/s", nl(mermaid), p->rate_hz);
    else
      fprintf(f, "%s(silent)", nl(mermaid));
    close_node(f, 'p', mermaid, p->bottleneck[0]);
  }
  for (size_t i = 0; i < v->n_chans; i++) {
    const gv_chan *c = &v->chans[i];
    if (!in_proc(pr, c->pid, c->host)) continue;
    open_node(f, 'c', i, mermaid, ind);
    label(f, c->mode ? c->mode : "unknown", mermaid);
    close_node(f, 'c', mermaid, false);
  }
  for (size_t i = 0; i < v->n_subs; i++) {
    const gv_sub *s = &v->subs[i];
    if (!in_proc(pr, s->pid, s->host)) continue;
    open_node(f, 's', i, mermaid, ind);
    fputs("sub ", f);
    label(f, s->handle ? s->handle : s->id, mermaid);
    if (s->n_chans)
      fprintf(f, "%s%.1f msg/s", nl(mermaid), s->rate_hz);
    else
      fprintf(f, "%sidle", nl(mermaid));
    close_node(f, 's', mermaid, s->bottleneck[0]);
  }
  fputs(mermaid ? "  end\n" : "  }\n", f);
}

/* The arrow of an edge: " -> " in dot, the given Mermaid arrow otherwise. */
static void edge(FILE *f, bool mermaid, const char *mermaid_arrow) {
  if (mermaid)
    fprintf(f, " %s ", mermaid_arrow);
  else
    fputs(" -> ", f);
}

static void end_edge(FILE *f, bool mermaid, const char *dot_attr) {
  if (mermaid)
    fputc('\n', f);
  else
    fprintf(f, "%s;\n", dot_attr);
}

char *gv_draw(const gv *v, bool mermaid) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  if (mermaid)
    fputs("flowchart LR\n", f);
  else
    fputs("digraph ezmsg {\n  rankdir=LR;\n  graph [fontname=\"Helvetica\", fontsize=11];\n"
          "  node [fontname=\"Helvetica\", fontsize=11];\n"
          "  edge [fontname=\"Helvetica\", fontsize=9];\n",
          f);
  for (size_t t = 0; t < v->n_topics; t++) {
    fputs("  ", f);
    topic_id(f, v, t, mermaid);
    if (mermaid) {
      fputs("(\"", f);
      label(f, v->topics[t].name, true);
      fputs("\")\n", f);
    } else {
      fputs(" [shape=box, style=\"rounded,bold\"];\n", f);
    }
  }
  for (size_t k = 0; k < v->n_procs; k++)
    draw_proc(f, v, k, mermaid);
  /* The topic graph. */
  for (size_t t = 0; t < v->n_topics; t++) {
    for (size_t k = 0; k < v->topics[t].n_to; k++) {
      fputs("  ", f);
      topic_id(f, v, t, mermaid);
      edge(f, mermaid, "-->");
      topic_id(f, v, v->topics[t].to[k], mermaid);
      end_edge(f, mermaid, "");
    }
  }
  /* Publishers into their topics; topics to their subscribers. */
  for (size_t i = 0; i < v->n_pubs; i++) {
    if (v->pubs[i].topic_ix == GV_NONE) continue;
    fputs("  ", f);
    node_id(f, 'p', i, mermaid);
    edge(f, mermaid, "-.->");
    topic_id(f, v, v->pubs[i].topic_ix, mermaid);
    end_edge(f, mermaid, " [style=dashed]");
  }
  for (size_t i = 0; i < v->n_subs; i++) {
    if (v->subs[i].topic_ix == GV_NONE) continue;
    fputs("  ", f);
    topic_id(f, v, v->subs[i].topic_ix, mermaid);
    edge(f, mermaid, "-.->");
    node_id(f, 's', i, mermaid);
    end_edge(f, mermaid, " [style=dotted]");
  }
  /* Data: publisher -> channel (its transport) -> subscribers. */
  for (size_t i = 0; i < v->n_chans; i++) {
    const gv_chan *c = &v->chans[i];
    if (c->pub_ix != GV_NONE) {
      fputs("  ", f);
      node_id(f, 'p', c->pub_ix, mermaid);
      edge(f, mermaid, "==>");
      node_id(f, 'c', i, mermaid);
      end_edge(f, mermaid, " [penwidth=2]");
    }
    for (size_t k = 0; k < c->n_subs; k++) {
      fputs("  ", f);
      node_id(f, 'c', i, mermaid);
      edge(f, mermaid, "==>");
      node_id(f, 's', c->subs[k], mermaid);
      end_edge(f, mermaid, " [penwidth=2]");
    }
  }
  if (!mermaid) fputs("}\n", f);
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}
