/* fuzz_pubacks: the publisher's channel server (pubserve.c on_chan / handshake): the CHANNEL
 * handshake and the RX_ACKs that free slots, fed by a fake channel.
 *
 * Once: an in-process graph server and a context. Each input: a fresh publisher (so message ids
 * start at 0 and an input can ack them), a raw connection to its channel server, and the input's
 * chunks (separated by FZ_SEP, at most 4) written one after the other; after each chunk the
 * publisher publishes one message (timeout 0 or 5 ms: a slot the fake channel holds may block it).
 * Then the connection closes, and the publisher must have every slot back within 2 s
 * (ez_pub_flush; else abort(): a lease leaked), and publish again.
 *
 * Byte 0 = flags: (flags & 3) + 1 buffers; (flags >> 2) & 3 messages published before the fake
 * channel connects; flags & 0x10: publish with a 5 ms timeout (else 0); flags & 0x20: force TCP;
 * flags & 0x40: read what the publisher sent before each publish. */
#include "core/context.h"
#include "fuzz_common.h"

#define TMO 5000
#define MAX_CHUNKS 4

static ez_server *g_srv;
static ez_context *g_ctx;
static unsigned g_count;

static void init(void) {
  if (g_srv) return;
  fz_quiet();
  g_srv = fz_server_start();
  if (ez_context_open(ez_server_address(g_srv), &g_ctx)) fz_die("fuzz_pubacks: context open");
}

static void noop(void *arg) { (void)arg; }

/* Lets the context's I/O thread handle what is already in its sockets. */
static void barrier(void) {
  ezi_ctx_call(g_ctx, noop, NULL);
  ezi_ctx_call(g_ctx, noop, NULL);
}

static ez_pub *make_pub(uint8_t flags, uint16_t *port) {
  char topic[64];
  snprintf(topic, sizeof topic, "fzp/%u", g_count++);
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = (flags & 3) + 1;
  o.buf_size = 256;
  o.force_tcp = (flags & 0x20) != 0;
  for (int attempt = 0; attempt < 20; attempt++) {
    o.port = fz_free_port(); /* may be taken meanwhile by someone else: then retry */
    ez_pub *p = NULL;
    int rc = ez_pub_create(g_ctx, topic, &o, &p);
    if (rc == 0) {
      *port = o.port;
      return p;
    }
    if (rc != EZ_EADDR) fz_die("fuzz_pubacks: ez_pub_create: %s", ez_strerror(rc));
  }
  fz_die("fuzz_pubacks: no free port for the publisher");
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init();
  fz_throttle();
  if (size < 1) return 0;
  uint8_t flags = data[0];
  fz_chunk ch[MAX_CHUNKS];
  size_t n = fz_split(data + 1, size - 1, ch, MAX_CHUNKS);
  int tmo = (flags & 0x10) ? 5 : 0;
  uint16_t port = 0;
  ez_pub *p = make_pub(flags, &port);
  static const char msg[] = "fuzz";
  for (unsigned i = 0; i < ((flags >> 2) & 3u); i++)
    if (ez_publish(p, msg, sizeof msg, 0)) fz_die("fuzz_pubacks: publish without channels failed");

  int fd = fz_connect(port);
  if (fd < 0)
    fz_die("fuzz_pubacks: cannot connect to the channel server on port %u: %s", port,
           strerror(errno));
  for (size_t i = 0; i < n; i++) {
    if (ch[i].n && fz_write(fd, ch[i].p, ch[i].n, 200)) break; /* it hung up on us */
    barrier();
    if (flags & 0x40) fz_read_avail(fd);
    int rc = ez_publish(p, msg, sizeof msg, tmo);
    if (rc && rc != EZ_ETIMEDOUT && rc != EZ_EAGAIN)
      fz_die("fuzz_pubacks: ez_publish: %s", ez_strerror(rc));
    barrier();
  }
  fz_read_avail(fd);
  fz_close_rst(fd); /* no TIME_WAIT left behind */

  /* The channel is gone: it must leave, every slot must come back, and publishing must work. */
  int64_t deadline = fz_now_ms() + 2000;
  for (;;) {
    barrier();
    if (ez_pub_num_channels(p) == 0) break;
    if (fz_now_ms() > deadline)
      fz_hang("fuzz_pubacks: a closed channel is still counted after 2 s");
    fz_sleep_ms(1);
  }
  int rc = ez_pub_flush(p, 2000);
  if (rc)
    fz_hang("fuzz_pubacks: slots still held 2 s after the channel left (%s)", ez_strerror(rc));
  rc = ez_publish(p, msg, sizeof msg, 1000);
  if (rc) fz_die("fuzz_pubacks: publish after the channel left: %s", ez_strerror(rc));
  ez_pub_destroy(p);
  return 0;
}

void fuzz_teardown(void) {
  ez_context_close(g_ctx);
  ez_server_stop(g_srv);
  g_ctx = NULL;
  g_srv = NULL;
}
