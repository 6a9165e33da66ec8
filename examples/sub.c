/* A minimal subscriber: prints COUNT messages from TOPIC, one a line, and exits.
 *
 *   example_sub TOPIC COUNT [HOST:PORT]
 *
 * It says "subscribed to TOPIC" on stderr once it is connected: anything published from then on
 * reaches it. It gives up if no message comes for 10 s. */
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
  ez_sub *sub = NULL;
  rc = ez_sub_create(ctx, topic, NULL, &sub);
  if (rc == 0) fprintf(stderr, "subscribed to %s\n", topic);
  for (long i = 0; rc == 0 && i < count; i++) {
    ez_msg msg;
    rc = ez_recv(sub, &msg, 10000); /* a zero-copy view of the message */
    if (rc) break;
    printf("%.*s\n", (int)msg.len, (const char *)msg.data);
    fflush(stdout);
    ez_msg_release(&msg); /* lets the publisher reuse its buffer */
  }
  if (rc) fprintf(stderr, "receiving on %s: %s\n", topic, ez_strerror(rc));
  ez_context_close(ctx); /* also destroys the subscriber */
  return rc ? 1 : 0;
}
