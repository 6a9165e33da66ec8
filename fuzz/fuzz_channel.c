/* fuzz_channel: a channel's link to a publisher in another process (chanlink.c: handshake,
 * data_frame, on_pub; channel.c: delivery, release, acks), with the harness playing the publisher.
 *
 * Once: an in-process graph server, a context on it, a real segment (4 buffers) leased from the
 * server by the harness, and a listening socket: the fake publisher's channel server.
 * Each input: a subscriber on a fresh topic; a fake publisher registered on that topic over the raw
 * protocol with the listening socket's address; the library's channel connects to it and the
 * harness does the publisher's side of the handshake (or leaves it to the input); then the fuzz
 * bytes go to the channel, and whatever it delivers is read, checked and released.
 *
 * Input: byte 0 = flags, then the stream for the channel, optionally followed by FZ_SEP and bytes
 * copied into every data block of the segment (the rest of each block is zeroed), optionally
 * followed by FZ_SEP and a second part of the stream, sent after messages were read (0x20).
 *  flags & 3        handshake shm name: 0 "", 1 and 3 the real segment, 2 a valid unknown name
 *  (flags >> 2) & 7 num_buffers announced: 4 (the segment's), 1, 2, 3, 8, 65536, 0, 65537
 *  flags & 0x20     read and release messages while the link is still open (acks flow back)
 *  flags & 0x40     keep received messages unreleased (every byte of each view is read again
 *                   at the end: a view must stay valid until released); ez_sub_destroy ends them
 *  flags & 0x80     raw: no handshake by the harness; the stream starts with the publisher's side
 *                   of it (str shm_name, then after the channel's answer COMPLETE, u64 nbuf)
 * In the stream, every str "psm_00000000" (u64 length 12, then those bytes) becomes the real
 * segment's name as a str.
 * After each input the context must have no channel left (2 s; else abort(), unless
 * $EZ_FUZZ_KNOWN contains "slotreuse": then everything is started afresh). */
#include "core/context.h"
#include "fuzz_common.h"

#define TMO 5000
#define SEG_NBUF 4
#define PLACEHOLDER "psm_00000000"

static ez_server *g_srv;
static ez_context *g_ctx;
static ez_shm *g_shm;
static int g_lfd = -1;
static uint16_t g_lport, g_sport;
static unsigned g_count;

/* The harness's segment outlives this process unless its name is removed: the graph server that
 * would unlink it runs in this process too. (Mappings stay valid after an unlink.) */
static char g_shm_name[64];
static void unlink_segment(void) {
  if (g_shm_name[0]) ezi_shm_unlink(g_shm_name);
  g_shm_name[0] = 0;
}

/* Copies n bytes of in to out, each str that is the placeholder (u64 length, then it) made the
 * str `real`; returns the bytes written (out has room for n * (1 + (8 + |real|) / (8 + 12))). */
static size_t put_named(uint8_t *out, const uint8_t *in, size_t n, const char *real) {
  size_t pl = strlen(PLACEHOLDER), rl = strlen(real), o = 0;
  uint8_t want[8];
  ezi_put_u64le(want, pl);
  for (size_t i = 0; i < n;) {
    if (i + 8 + pl <= n && !memcmp(in + i, want, 8) && !memcmp(in + i + 8, PLACEHOLDER, pl)) {
      ezi_put_u64le(out + o, rl);
      memcpy(out + o + 8, real, rl);
      o += 8 + rl;
      i += 8 + pl;
    } else {
      out[o++] = in[i++];
    }
  }
  return o;
}

static void init(void) {
  if (g_srv) return;
  fz_quiet();
  g_count = 0;
  g_srv = fz_server_start();
  g_sport = fz_addr_port(ez_server_address(g_srv));
  if (ez_context_open(ez_server_address(g_srv), &g_ctx)) fz_die("fuzz_channel: context open");
  if (ez_shm_create(ez_server_address(g_srv), SEG_NBUF, 4096, &g_shm, TMO))
    fz_die("fuzz_channel: shm create");
  snprintf(g_shm_name, sizeof g_shm_name, "%s", ez_shm_name(g_shm));
  fz_cleanup = unlink_segment;
  atexit(unlink_segment); /* libFuzzer ends a run with exit() */
  g_lfd = fz_listen(&g_lport);
  if (g_lfd < 0) fz_die("fuzz_channel: listen");
}

static void noop(void *arg) { (void)arg; }

/* Lets the context's I/O thread handle what is already in its sockets. */
static void barrier(void) {
  ezi_ctx_call(g_ctx, noop, NULL);
  ezi_ctx_call(g_ctx, noop, NULL);
}

/* Channels the context still has. */
static size_t live_channels(void) {
  pthread_mutex_lock(&g_ctx->mu);
  size_t n = g_ctx->n_chans;
  pthread_mutex_unlock(&g_ctx->mu);
  return n;
}

typedef struct held {
  ez_msg m[64];
  size_t n;
} held;

/* Reads every byte a message view shows (AddressSanitizer checks it is all still there). */
static void touch(const ez_msg *m) {
  if (m->len && !m->data) fz_die("fuzz_channel: NULL payload");
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < m->len; i++)
    sum += ((const uint8_t *)m->data)[i];
  if (m->flags & EZ_MSG_RAW_PICKLE) {
    for (size_t k = 0; k < m->nbufs; k++)
      for (size_t i = 0; i < m->bufs[k].len; i++)
        sum += ((const uint8_t *)m->bufs[k].data)[i];
  }
  (void)sum;
}

/* Reads every message waiting (timeout 0), checks it, and releases it or keeps it in h. */
static void drain(ez_sub *sub, const char *pub_id, held *h) {
  ez_msg m;
  while (ez_recv(sub, &m, 0) == 0) {
    if (strcmp(m.pub_id, pub_id) != 0) fz_die("fuzz_channel: message from %s", m.pub_id);
    touch(&m);
    if (h && h->n < 64)
      h->m[h->n++] = m;
    else
      ez_msg_release(&m);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint64_t nbufs[8] = {SEG_NBUF, 1, 2, 3, 8, 65536, 0, 65537};
  init();
  fz_throttle();
  if (size < 1) return 0;
  uint8_t flags = data[0];
  fz_chunk ch[3];
  size_t nch = fz_split(data + 1, size - 1, ch, 3);

  /* The segment's data blocks. */
  uint64_t room = ez_shm_buffer_size(g_shm);
  for (uint64_t i = 0; i < SEG_NBUF; i++) {
    uint8_t *b = ez_shm_buffer(g_shm, i);
    memset(b, 0, (size_t)room);
    if (nch > 1 && ch[1].n) memcpy(b, ch[1].p, ch[1].n < room ? ch[1].n : (size_t)room);
  }
  /* The stream (both parts), with the segment's real name. */
  const char *real = ez_shm_name(g_shm);
  size_t n0 = ch[0].n, n2 = nch > 2 ? ch[2].n : 0, grow = strlen(real) + 8;
  uint8_t *stream = malloc((n0 + n2) * (1 + grow / (8 + strlen(PLACEHOLDER))) + 1);
  if (!stream) return 0;
  n0 = put_named(stream, ch[0].p, n0, real);
  n2 = nch > 2 ? put_named(stream + n0, ch[2].p, n2, real) : 0;

  char topic[64];
  snprintf(topic, sizeof topic, "fzc/%u", g_count++);
  held h = {.n = 0};
  ez_sub *sub = NULL;
  int rc = ez_sub_create(g_ctx, topic, NULL, &sub);
  if (rc) fz_die("fuzz_channel: ez_sub_create: %s", ez_strerror(rc));

  /* The fake publisher registers; the server sends the subscriber an UPDATE, its channel connects
   * to us, and the server answers our registration once the subscriber has answered. */
  int g = fz_connect(g_sport);
  char pub_id[64], addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", g_lport);
  if (g < 0 || fz_read_version(g, TMO) || fz_write_u8(g, FZ_PUBLISH, TMO) ||
      fz_write_str(g, topic, TMO) || fz_read_str(g, pub_id, sizeof pub_id, TMO) ||
      fz_write_str(g, addr, TMO))
    fz_hang("fuzz_channel: fake publisher registration failed");
  int d = fz_accept(g_lfd, TMO);
  if (d < 0) {
    int probe = fz_connect(g_lport); /* can anyone connect here at all? */
    int e = errno;
    fz_hang("fuzz_channel: the channel never connected (a probe connection: %s)",
            probe >= 0 ? "works" : strerror(e));
  }
  uint8_t cmd = 0xff;
  char chan_id[64];
  if (fz_read(d, &cmd, 1, TMO) || cmd != FZ_CHANNEL || fz_read_str(d, chan_id, sizeof chan_id, TMO))
    fz_die("fuzz_channel: bad CHANNEL from the channel (cmd %u)", cmd);
  if (flags & 0x80) {
    /* Raw: the stream plays the publisher's side of the handshake too. The subscriber answers
     * its UPDATE (so the server completes our registration) once the handshake ends either way. */
    if (n0 + n2) fz_write(d, stream, n0 + n2, 1000);
    shutdown(d, SHUT_WR);
    if (fz_read(g, &cmd, 1, TMO) || cmd != FZ_COMPLETE)
      fz_hang("fuzz_channel: the server never completed the registration");
  } else {
    const char *shm_name = (flags & 1) ? ez_shm_name(g_shm) : (flags & 2) ? "psm_fzunknown" : "";
    uint64_t pid = 0;
    if (fz_write_str(d, shm_name, TMO) || fz_read(d, &cmd, 1, TMO) || fz_read_u64(d, &pid, TMO))
      fz_hang("fuzz_channel: handshake: no SHM answer");
    if (cmd != ((flags & 1) ? FZ_SHM_OK : FZ_SHM_ATTACH_FAILED))
      fz_die("fuzz_channel: handshake: answer %u to segment '%s'", cmd, shm_name);
    if (pid != (uint64_t)getpid())
      fz_die("fuzz_channel: handshake: pid %llu", (unsigned long long)pid);
    uint64_t nbuf = nbufs[(flags >> 2) & 7];
    fz_write_u8(d, FZ_COMPLETE, TMO);
    fz_write_u64(d, nbuf, TMO);
    if (fz_read(g, &cmd, 1, TMO) || cmd != FZ_COMPLETE)
      fz_hang("fuzz_channel: the server never completed the registration");
    /* The fuzz bytes. The channel may drop the link at any point: then writes just fail. */
    if (n0) fz_write(d, stream, n0, 1000);
    if (flags & 0x20) {
      barrier();
      drain(sub, pub_id, (flags & 0x40) ? &h : NULL); /* acks (if released) go back */
    }
    if (n2) fz_write(d, stream + n0, n2, 1000); /* while those views may still be held */
    shutdown(d, SHUT_WR);
  }
  if (!fz_drain(d, TMO)) fz_hang("fuzz_channel: the channel kept the link %d ms after EOF", TMO);
  drain(sub, pub_id, (flags & 0x40) ? &h : NULL);
  bool known = fz_known("slotreuse");
  for (size_t i = 0; i < h.n && !known; i++) /* a view stays valid until released */
    touch(&h.m[i]);
  ez_sub_destroy(sub); /* ends the views still held, too (they must not be released after) */
  fz_close_rst(g);     /* no TIME_WAIT left behind */
  close(d);
  fz_accept_drop(g_lfd);
  free(stream);
  /* Its last subscriber gone and every message released, the channel must go too (else its
   * memory and its graph-server connection leak, and the server runs out of connections). */
  int64_t deadline = fz_now_ms() + (known ? 50 : 2000);
  while (live_channels()) {
    if (fz_now_ms() > deadline) {
      if (!known) fz_die("fuzz_channel: a channel outlived its last subscriber");
      /* Known bug: start over (the leaked channels stay leaked; run without leak detection). */
      fuzz_teardown();
      init();
      break;
    }
    barrier();
    fz_sleep_ms(1);
  }
  return 0;
}

void fuzz_teardown(void) {
  ez_shm_close(g_shm);
  ez_server_stop(g_srv); /* first: whatever still links to it sees EOF and closes */
  if (g_ctx) barrier();
  ez_context_close(g_ctx);
  if (g_lfd >= 0) close(g_lfd);
  g_shm = NULL;
  g_ctx = NULL;
  g_srv = NULL;
  g_lfd = -1;
}
