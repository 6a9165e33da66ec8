/* A relay: receives every message of topic IN and republishes it, upper-cased, on topic OUT over
 * TCP (force_tcp), both without copying more than once: the received message is a view into the
 * sender's memory and the result is written straight into the outgoing buffer slot.
 *
 *   example_relay IN OUT [HOST:PORT]
 *
 * Runs until SIGINT/SIGTERM; says "relay IN -> OUT ready" on stderr once connected. */
#include <ezmsg/ezmsg.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: %s IN OUT [HOST:PORT]\n", argv[0]);
    return 2;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  ez_context *ctx = NULL;
  int rc = ez_context_open(argc > 3 ? argv[3] : NULL, &ctx);
  if (rc) {
    fprintf(stderr, "cannot join the graph: %s\n", ez_strerror(rc));
    return 1;
  }
  ez_pub_opts opts;
  ez_pub_opts_init(&opts);
  opts.force_tcp = true; /* never shared memory, even on this host */
  ez_pub *pub = NULL;
  ez_sub *sub = NULL;
  rc = ez_pub_create(ctx, argv[2], &opts, &pub);
  if (rc == 0) rc = ez_sub_create(ctx, argv[1], NULL, &sub);
  if (rc == 0) fprintf(stderr, "relay %s -> %s ready\n", argv[1], argv[2]);
  unsigned long n = 0;
  while (rc == 0 && !stop) {
    ez_msg in;
    rc = ez_recv(sub, &in, 200); /* short waits, to notice a signal */
    if (rc == EZ_ETIMEDOUT) {
      rc = 0;
      continue;
    }
    if (rc) break;
    void *out;
    rc = ez_pub_loan(pub, in.len, &out, -1);
    if (rc == 0) {
      const char *src = in.data;
      char *dst = out;
      for (size_t i = 0; i < in.len; i++)
        dst[i] = src[i] >= 'a' && src[i] <= 'z' ? (char)(src[i] - 'a' + 'A') : src[i];
      rc = ez_pub_commit(pub, in.len);
      n++;
    }
    ez_msg_release(&in);
  }
  if (rc == 0) rc = ez_pub_flush(pub, 5000);
  if (rc) fprintf(stderr, "relay: %s\n", ez_strerror(rc));
  fprintf(stderr, "relay: forwarded %lu messages\n", n);
  ez_context_close(ctx);
  return rc ? 1 : 0;
}
