/* `ezmsg pub` and `ezmsg sub`: publish to and print from a topic, for shells and tests.
 *
 * Both run until their work is done or SIGINT/SIGTERM, which they handle by finishing cleanly
 * (closing the context, so segments are released and an embedded server stops). Library calls
 * block in short slices so a signal is noticed promptly; the library's own threads are created
 * with those signals blocked so only the main thread sees them. */
#include "cli.h"
#include "pace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLICE_MS 100 /* longest a blocking call runs before we look at the stop flag */

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

/* SIGINT/SIGTERM set g_stop (no SA_RESTART: a blocked read returns EINTR). They stay blocked
 * while the context starts its threads; unblock_signals() then lets the main thread take them. */
static void catch_signals(sigset_t *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, old);
}

static void unblock_signals(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Milliseconds left before deadline (UINT64_MAX: none), as a slice for one blocking call. */
static int slice(uint64_t deadline) {
  if (deadline == UINT64_MAX) return SLICE_MS;
  uint64_t now = now_ms();
  if (now >= deadline) return 0;
  return deadline - now < SLICE_MS ? (int)(deadline - now) : SLICE_MS;
}

static uint64_t deadline_after(int timeout_ms) {
  return timeout_ms < 0 ? UINT64_MAX : now_ms() + (uint64_t)timeout_ms;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
  if (!s || !*s || *s == '-' || *s == '+') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > max) return -1;
  *out = v;
  return 0;
}

/* ---- pub ----------------------------------------------------------------------------------- */

enum {
  OPT_FORCE_TCP = 2000,
  OPT_WAIT_SUBS,
  OPT_READY_FILE,
  OPT_HANDLE,
  OPT_HOST,
  OPT_LEAKY,
  OPT_HOLD
};

static const struct option pub_opts[] = {
    {"message", required_argument, NULL, 'm'},
    {"size", required_argument, NULL, 's'},
    {"count", required_argument, NULL, 'n'},
    {"rate", required_argument, NULL, 'r'},
    {"num-buffers", required_argument, NULL, 'b'},
    {"force-tcp", no_argument, NULL, OPT_FORCE_TCP},
    {"wait-subscribers", required_argument, NULL, OPT_WAIT_SUBS},
    {"host", required_argument, NULL, OPT_HOST},
    {0},
};

static const cli_spec pub_spec = {
    .name = "pub",
    .args = "TOPIC",
    .about =
        "Publishes to TOPIC. Without --message or --size, publishes each line of stdin (without\n"
        "its newline) and exits at the end of input. With --message or --size, publishes\n"
        "--count messages. Either way it exits once every subscriber has released all it was\n"
        "sent. Publishing waits while subscribers hold every buffer (backpressure); nothing is\n"
        "dropped. SIGINT/SIGTERM stop it cleanly. Without --address, a graph server is started\n"
        "in this process if none answers at the default address.",
    .min_args = 1,
    .max_args = 1,
    .timeout_ms = -1,
    .opts = pub_opts,
    .opts_short = "m:s:n:r:b:",
    .opts_help =
        "  -m, --message TEXT publish TEXT\n"
        "  -s, --size N       publish N-byte payloads (bytes 0..7: the message number, little-\n"
        "                     endian, if N >= 8; byte i >= 8: i mod 256)\n"
        "  -n, --count N      with --message/--size: how many (default 1; 0: until stopped);\n"
        "                     reading stdin: stop after N lines (default 0: all)\n"
        "  -r, --rate HZ      at most HZ messages per second, also after a stall (no catch-up\n"
        "                     burst; default: as fast as possible)\n"
        "  -b, --num-buffers N  buffer slots of the publisher (default 32)\n"
        "      --force-tcp    send to other processes over TCP, never shared memory\n"
        "      --wait-subscribers N  first wait until N subscribing processes are connected\n"
        "      --host H       listen for channels on H (default 127.0.0.1; another host's\n"
        "                     subscribers need an address they can reach)\n"
        "  (--timeout S bounds each wait: for subscribers, for a free buffer, for the final\n"
        "   release of everything sent; default: wait as long as it takes)\n",
};

typedef struct pub_args {
  const char *message;
  bool have_size, have_count;
  uint64_t size, count, num_buffers, wait_subs;
  double rate;
  bool force_tcp;
  const char *host;
} pub_args;

static int pub_opt(int opt, const char *arg, void *user) {
  pub_args *a = user;
  switch (opt) {
  case 'm': a->message = arg; return 0;
  case 's': a->have_size = true; return parse_u64(arg, (uint64_t)1 << 34, &a->size);
  case 'n': a->have_count = true; return parse_u64(arg, UINT64_MAX, &a->count);
  case 'b': return parse_u64(arg, 1u << 20, &a->num_buffers) || a->num_buffers < 1 ? -1 : 0;
  case OPT_WAIT_SUBS: return parse_u64(arg, 1u << 20, &a->wait_subs);
  case OPT_FORCE_TCP: a->force_tcp = true; return 0;
  case OPT_HOST: a->host = arg; return *arg && strlen(arg) < 256 ? 0 : -1;
  case 'r': {
    char *end;
    errno = 0;
    a->rate = strtod(arg, &end);
    return errno || end == arg || *end || !isfinite(a->rate) || a->rate <= 0 ? -1 : 0;
  }
  default: return -1;
  }
}

/* Sleeps until the next message is due (pace.h); false if stopped. */
static bool wait_turn(pace *pc) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
  uint64_t at_ns = pace_due(pc, now_ns);
  if (at_ns > now_ns) {
    struct timespec due = {(time_t)(at_ns / 1000000000u), (long)(at_ns % 1000000000u)};
    while (!g_stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR) {
    }
  }
  return !g_stop;
}

/* Publishes one message, waiting out backpressure in slices until timeout_ms (< 0: forever).
 * 1 if stopped, else 0 or an error. */
static int publish_one(ez_pub *pub, const void *data, size_t len, int timeout_ms) {
  uint64_t deadline = deadline_after(timeout_ms);
  for (;;) {
    if (g_stop) return 1;
    int rc = ez_publish(pub, data, len, slice(deadline));
    if (rc != EZ_ETIMEDOUT || slice(deadline) == 0) return rc;
  }
}

static void fill_sized(uint8_t *buf, uint64_t size, uint64_t k) {
  if (size < 8) return;
  for (int i = 0; i < 8; i++)
    buf[i] = (uint8_t)(k >> (8 * i));
}

int cmd_pub(int argc, char **argv) {
  pub_args a = {.num_buffers = 32};
  cli_ctx ctx;
  int rc = cli_parse(&pub_spec, argc, argv, &ctx, pub_opt, &a);
  if (rc >= 0) return rc;
  if (a.message && a.have_size)
    return cli_usage_error(&pub_spec, "--message and --size exclude each other");
  const char *topic = ctx.argv[0];
  bool from_stdin = !a.message && !a.have_size;
  uint64_t count = a.have_count ? a.count : (from_stdin ? 0 : 1);

  uint8_t *sized = NULL;
  if (a.have_size) {
    sized = malloc(a.size ? (size_t)a.size : 1);
    if (!sized)
      return cli_fail(&ctx, EZ_ENOMEM, "allocating %llu bytes", (unsigned long long)a.size);
    for (uint64_t i = 0; i < a.size; i++)
      sized[i] = (uint8_t)i;
  }

  sigset_t old;
  catch_signals(&old);
  ez_context *ez = NULL;
  rc = ez_context_open(ctx.address, &ez);
  unblock_signals(&old);
  if (rc) {
    free(sized);
    return cli_fail(&ctx, rc, "opening a context");
  }
  ez_pub_opts o;
  ez_pub_opts_init(&o);
  o.num_buffers = (uint32_t)a.num_buffers;
  o.force_tcp = a.force_tcp;
  if (a.host) o.host = a.host;
  if (a.have_size && a.size + 64 > o.buf_size) o.buf_size = a.size + 64; /* no grow mid-stream */
  ez_pub *pub = NULL;
  rc = ez_pub_create(ez, topic, &o, &pub);
  if (rc) {
    ez_context_close(ez);
    free(sized);
    return cli_fail(&ctx, rc, "publishing on %s", topic);
  }

  int exit_code = 0;
  uint64_t deadline = deadline_after(ctx.timeout_ms);
  while (!g_stop && ez_pub_num_channels(pub) < a.wait_subs) {
    int s = slice(deadline);
    if (s == 0) {
      fprintf(stderr, "ezmsg pub: timed out waiting for %llu subscribing processes (have %zu)\n",
              (unsigned long long)a.wait_subs, ez_pub_num_channels(pub));
      exit_code = 1;
      break;
    }
    struct timespec ts = {0, (long)(s < 10 ? s : 10) * 1000000L};
    nanosleep(&ts, NULL);
  }

  pace pc = pace_new(a.rate);
  char *line = NULL;
  size_t cap = 0;
  for (uint64_t k = 0; !exit_code && (count == 0 || k < count); k++) {
    if (!wait_turn(&pc)) break;
    const void *data;
    size_t len;
    if (from_stdin) {
      errno = 0;
      ssize_t n = getline(&line, &cap, stdin);
      if (n < 0) {
        if (errno == EINTR && !g_stop) { /* a signal we do not stop for: read on */
          clearerr(stdin);
          k--;
          continue;
        }
        if (ferror(stdin) && !g_stop) {
          fprintf(stderr, "ezmsg pub: reading stdin: %s\n", strerror(errno));
          exit_code = 1;
        }
        break;
      }
      if (n > 0 && line[n - 1] == '\n') n--;
      data = line;
      len = (size_t)n;
    } else if (a.message) {
      data = a.message;
      len = strlen(a.message);
    } else {
      fill_sized(sized, a.size, k);
      data = sized;
      len = (size_t)a.size;
    }
    rc = publish_one(pub, data, len, ctx.timeout_ms);
    pace_sent(&pc);
    if (rc == 1) break;
    if (rc) exit_code = cli_fail(&ctx, rc, "publishing on %s", topic);
  }
  free(line);
  free(sized);

  /* Everything sent must be released before we go (a stop signal abandons the wait). */
  deadline = deadline_after(ctx.timeout_ms);
  while (!exit_code && !g_stop) {
    int s = slice(deadline);
    rc = s ? ez_pub_flush(pub, s) : EZ_ETIMEDOUT;
    if (rc == 0) break;
    if (rc != EZ_ETIMEDOUT || s == 0 || slice(deadline) == 0) {
      exit_code = cli_fail(&ctx, rc, "waiting for subscribers to release %s", topic);
      break;
    }
  }
  ez_pub_destroy(pub);
  ez_context_close(ez);
  return exit_code;
}

/* ---- sub ----------------------------------------------------------------------------------- */

static const struct option sub_opts[] = {
    {"count", required_argument, NULL, 'n'},
    {"handle", required_argument, NULL, OPT_HANDLE},
    {"ready-file", required_argument, NULL, OPT_READY_FILE},
    {"leaky", required_argument, NULL, OPT_LEAKY},
    {"hold", required_argument, NULL, OPT_HOLD},
    {0},
};

static const cli_spec sub_spec = {
    .name = "sub",
    .args = "TOPIC",
    .about =
        "Prints each message received on TOPIC (or upstream of it) on its own line: as text if\n"
        "it is valid UTF-8 without control characters other than tab, else in lower-case hex.\n"
        "Exits 0 after --count messages (or on SIGINT/SIGTERM), 1 if --timeout S passes\n"
        "without a message (default: wait forever) or the graph server goes away. Without\n"
        "--address, a graph server is started in this process if none answers at the default\n"
        "address.",
    .min_args = 1,
    .max_args = 1,
    .timeout_ms = -1,
    .opts = sub_opts,
    .opts_short = "n:",
    .opts_help = "  -n, --count N      exit after N messages (default 0: never)\n"
                 "      --handle NAME  the subscriber's label in profiles (default: the topic)\n"
                 "      --ready-file PATH  create PATH once subscribed (every publisher already\n"
                 "                     on the topic is connected by then)\n"
                 "      --leaky N      a leaky subscriber: at most N messages wait for it; when\n"
                 "                     another comes, the oldest waiting is dropped (its buffer\n"
                 "                     freed at once) instead of holding the publisher back\n"
                 "      --hold MS      hold each message MS milliseconds before releasing it (a\n"
                 "                     slow stage, for trying backpressure and --leaky)\n",
};

typedef struct sub_args {
  uint64_t count, leaky, hold_ms;
  const char *handle, *ready_file;
} sub_args;

static int sub_opt(int opt, const char *arg, void *user) {
  sub_args *a = user;
  switch (opt) {
  case 'n': return parse_u64(arg, UINT64_MAX, &a->count);
  case OPT_HANDLE: a->handle = arg; return 0;
  case OPT_READY_FILE: a->ready_file = arg; return *arg ? 0 : -1;
  case OPT_LEAKY: return parse_u64(arg, UINT32_MAX, &a->leaky) || !a->leaky ? -1 : 0;
  case OPT_HOLD: return parse_u64(arg, 3600000, &a->hold_ms);
  default: return -1;
  }
}

/* True if p[0..n) is valid UTF-8 with no control characters (C0, DEL, C1) other than tab. */
static bool printable_utf8(const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = p[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
      i++;
      continue;
    }
    uint32_t cp;
    size_t len;
    if (c >= 0xc2 && c <= 0xdf)
      len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
      len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
      len = 4, cp = c & 0x07;
    else
      return false;
    if (n - i < len) return false;
    for (size_t k = 1; k < len; k++) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return false;
    if (cp >= 0xd800 && cp <= 0xdfff) return false; /* surrogates */
    if (cp >= 0x80 && cp <= 0x9f) return false;     /* C1 controls */
    i += len;
  }
  return true;
}

/* One message as one line on stdout, flushed. False if stdout failed. */
static bool print_message(const void *data, size_t len) {
  const uint8_t *p = data;
  if (printable_utf8(p, len)) {
    if (len && fwrite(p, 1, len, stdout) != len) return false;
  } else {
    static const char hex[] = "0123456789abcdef";
    char chunk[8192];
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
      chunk[k++] = hex[p[i] >> 4];
      chunk[k++] = hex[p[i] & 15];
      if (k == sizeof chunk) {
        if (fwrite(chunk, 1, k, stdout) != k) return false;
        k = 0;
      }
    }
    if (k && fwrite(chunk, 1, k, stdout) != k) return false;
  }
  return fputc('\n', stdout) != EOF && fflush(stdout) == 0;
}

static int touch(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

int cmd_sub(int argc, char **argv) {
  sub_args a = {0};
  cli_ctx ctx;
  int rc = cli_parse(&sub_spec, argc, argv, &ctx, sub_opt, &a);
  if (rc >= 0) return rc;
  const char *topic = ctx.argv[0];

  sigset_t old;
  catch_signals(&old);
  ez_context *ez = NULL;
  rc = ez_context_open(ctx.address, &ez);
  unblock_signals(&old);
  if (rc) return cli_fail(&ctx, rc, "opening a context");
  ez_sub_opts so = {.handle = a.handle, .leaky = a.leaky > 0, .max_queue = (uint32_t)a.leaky};
  ez_sub *sub = NULL;
  rc = ez_sub_create(ez, topic, &so, &sub);
  if (rc) {
    ez_context_close(ez);
    return cli_fail(&ctx, rc, "subscribing to %s", topic);
  }
  int exit_code = 0;
  if (a.ready_file && touch(a.ready_file)) {
    fprintf(stderr, "ezmsg sub: cannot create %s: %s\n", a.ready_file, strerror(errno));
    exit_code = 1;
  }

  uint64_t got = 0;
  uint64_t deadline = deadline_after(ctx.timeout_ms);
  while (!exit_code && !g_stop && (a.count == 0 || got < a.count)) {
    int s = slice(deadline);
    if (s == 0) {
      fprintf(stderr, "ezmsg sub: no message on %s for %d ms\n", topic, ctx.timeout_ms);
      exit_code = 1;
      break;
    }
    ez_msg m;
    rc = ez_recv(sub, &m, s);
    if (rc == EZ_ETIMEDOUT || rc == EZ_EAGAIN) continue;
    if (rc == EZ_ECONNLOST) {
      fprintf(stderr, "ezmsg sub: lost the graph server at %s\n", ctx.shown);
      exit_code = 1;
      break;
    }
    if (rc) {
      exit_code = cli_fail(&ctx, rc, "receiving on %s", topic);
      break;
    }
    bool ok = print_message(m.data, m.len);
    if (a.hold_ms) {
      struct timespec ts = {(time_t)(a.hold_ms / 1000), (long)(a.hold_ms % 1000) * 1000000L};
      while (nanosleep(&ts, &ts) && !g_stop) {
      }
    }
    ez_msg_release(&m);
    if (!ok) {                    /* stdout gone (e.g. a closed pipe): nothing more to say ... */
      exit_code = g_stop ? 0 : 1; /* ... or a stop signal interrupted a write to a full pipe */
      break;
    }
    got++;
    deadline = deadline_after(ctx.timeout_ms);
  }
  ez_sub_destroy(sub);
  ez_context_close(ez);
  return exit_code;
}
