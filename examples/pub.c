/* A minimal publisher: sends COUNT text messages on TOPIC, waits until every subscriber has
 * released them, and exits.
 *
 *   example_pub TOPIC COUNT [HOST:PORT]
 *
 * Without an address it uses $EZMSG_GRAPHSERVER_ADDR or 127.0.0.1:25978, starting a graph server
 * in this process if none answers there. */
#include <ezmsg/ezmsg.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: %s TOPIC COUNT [HOST:PORT]\n", argv[0]);
    return 2;
  }
  const char *topic = argv[1], *address = argc > 3 ? argv[3] : NULL;
  long count = strtol(argv[2], NULL, 10);

  ez_context *ctx = NULL;
  int rc = ez_context_open(address, &ctx);
  if (rc) {
    fprintf(stderr, "cannot join the graph: %s\n", ez_strerror(rc));
    return 1;
  }
  ez_pub *pub = NULL;
  rc = ez_pub_create(ctx, topic, NULL, &pub); /* NULL: default options */
  for (long i = 0; rc == 0 && i < count; i++) {
    char text[64];
    int n = snprintf(text, sizeof text, "hello %ld", i);
    rc = ez_publish(pub, text, (size_t)n, -1); /* waits while subscribers hold every buffer */
  }
  if (rc == 0) rc = ez_pub_flush(pub, 10000); /* every message released by every subscriber */
  if (rc) fprintf(stderr, "publishing on %s: %s\n", topic, ez_strerror(rc));
  ez_context_close(ctx); /* also destroys the publisher */
  return rc ? 1 : 0;
}
