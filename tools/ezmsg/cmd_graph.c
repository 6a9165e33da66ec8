/* The one-shot graph commands: shutdown, connect, disconnect, graphviz, mermaid, sync, pause,
 * resume. Each is one library call against the graph server (graphviz and mermaid: the graph
 * view, graphview.h). */
#include "cli.h"
#include "gvdraw.h"

#include <stdlib.h>
#include <string.h>

static const cli_spec shutdown_spec = {
    .name = "shutdown",
    .args = "",
    .about = "Asks the graph server to stop.",
    .max_args = 0,
};

static const cli_spec connect_spec = {
    .name = "connect",
    .args = "FROM TO",
    .about = "Adds the edge FROM -> TO to the topic graph: subscribers of TO then also receive\n"
             "what is published on FROM. Fails if the edge would create a cycle.",
    .min_args = 2,
    .max_args = 2,
};

static const cli_spec disconnect_spec = {
    .name = "disconnect",
    .args = "FROM TO",
    .about = "Removes the edge FROM -> TO from the topic graph (an absent edge is fine); topics\n"
             "left without edges are dropped from the graph.",
    .min_args = 2,
    .max_args = 2,
};

static const cli_spec graphviz_spec = {
    .name = "graphviz",
    .args = "",
    .about = "Prints the graph in Graphviz dot on stdout: topics and their edges, and each\n"
             "process with its publishers, channels (labelled with their transport) and\n"
             "subscribers (`ezmsg graphviz | dot -Tsvg > graph.svg`).",
    .max_args = 0,
};

static const cli_spec mermaid_spec = {
    .name = "mermaid",
    .args = "",
    .about = "Prints the graph as a Mermaid flowchart on stdout: topics and their edges, and\n"
             "each process with its publishers, channels and subscribers.",
    .max_args = 0,
};

static const cli_spec sync_spec = {
    .name = "sync",
    .args = "",
    .about = "Asks every publisher to drain its buffers and returns once all have; they stay\n"
             "paused afterwards (`ezmsg resume`).",
    .max_args = 0,
    .timeout_ms = 30000,
};

static const cli_spec pause_spec = {
    .name = "pause",
    .args = "",
    .about = "Pauses every publisher of the graph.",
    .max_args = 0,
};

static const cli_spec resume_spec = {
    .name = "resume",
    .args = "",
    .about = "Resumes every publisher of the graph.",
    .max_args = 0,
};

int cmd_shutdown(int argc, char **argv) {
  cli_ctx ctx;
  int rc = cli_parse(&shutdown_spec, argc, argv, &ctx, NULL, NULL);
  if (rc >= 0) return rc;
  rc = ez_graph_shutdown(ctx.address, ctx.timeout_ms);
  return rc ? cli_fail(&ctx, rc, "shutdown") : 0;
}

static int edge(const cli_spec *spec, int argc, char **argv) {
  cli_ctx ctx;
  int rc = cli_parse(spec, argc, argv, &ctx, NULL, NULL);
  if (rc >= 0) return rc;
  const char *from = ctx.argv[0], *to = ctx.argv[1];
  bool conn = spec == &connect_spec;
  rc = conn ? ez_graph_connect(ctx.address, from, to, ctx.timeout_ms)
            : ez_graph_disconnect(ctx.address, from, to, ctx.timeout_ms);
  if (rc == EZ_ECYCLIC) {
    fprintf(stderr, "ezmsg: connecting %s -> %s would create a cycle\n", from, to);
    return 1;
  }
  return rc ? cli_fail(&ctx, rc, "%s %s -> %s", spec->name, from, to) : 0;
}

int cmd_connect(int argc, char **argv) { return edge(&connect_spec, argc, argv); }
int cmd_disconnect(int argc, char **argv) { return edge(&disconnect_spec, argc, argv); }

static int render(const cli_spec *spec, const char *fmt, int argc, char **argv) {
  cli_ctx ctx;
  int rc = cli_parse(spec, argc, argv, &ctx, NULL, NULL);
  if (rc >= 0) return rc;
  gv v;
  rc = gv_fetch(ctx.address, EZ_PROFILE_WINDOW_S, ctx.timeout_ms, &v);
  if (rc) return cli_fail(&ctx, rc, "reading the graph");
  char *text = gv_draw(&v, !strcmp(fmt, "mermaid"));
  gv_free(&v);
  if (!text) return cli_fail(&ctx, EZ_ENOMEM, "rendering the graph");
  fputs(text, stdout);
  free(text);
  return 0;
}

int cmd_graphviz(int argc, char **argv) { return render(&graphviz_spec, "graphviz", argc, argv); }
int cmd_mermaid(int argc, char **argv) { return render(&mermaid_spec, "mermaid", argc, argv); }

static int simple(const cli_spec *spec, int (*call)(const char *, int), int argc, char **argv) {
  cli_ctx ctx;
  int rc = cli_parse(spec, argc, argv, &ctx, NULL, NULL);
  if (rc >= 0) return rc;
  rc = call(ctx.address, ctx.timeout_ms);
  return rc ? cli_fail(&ctx, rc, "%s", spec->name) : 0;
}

int cmd_sync(int argc, char **argv) { return simple(&sync_spec, ez_graph_sync, argc, argv); }
int cmd_pause(int argc, char **argv) { return simple(&pause_spec, ez_graph_pause, argc, argv); }
int cmd_resume(int argc, char **argv) { return simple(&resume_spec, ez_graph_resume, argc, argv); }
