/* Corpus replayer: runs a fuzz target's LLVMFuzzerTestOneInput over every file of the directories
 * (or the files) named on the command line, in name order, each input in its own exact-size heap
 * buffer (as libFuzzer does, so that AddressSanitizer sees any read past its end). Built for every
 * target with any compiler, without libFuzzer; CTest runs it over fuzz/corpus/<target>/.
 * $EZ_FUZZ_VERBOSE=1 prints each file and its time. */
#include "fuzz_common.h"

#include <dirent.h>
#include <sys/stat.h>

static int run_file(const char *path, bool verbose) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "replay: out of memory reading %s\n", path);
    return -1;
  }
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, n);
  free(buf);
  int64_t t0 = fz_now_ms();
  if (verbose) fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
  LLVMFuzzerTestOneInput(exact, n);
  if (verbose) fprintf(stderr, "replay:   %lld ms\n", (long long)(fz_now_ms() - t0));
  free(exact);
  return 0;
}

static int skip_dots(const struct dirent *e) { return e->d_name[0] != '.'; }

int main(int argc, char **argv) {
  setenv("EZ_FUZZ_MAX_TW", "0", 0); /* a replay is a few inputs: no TIME_WAIT throttling */
  const char *v = getenv("EZ_FUZZ_VERBOSE");
  bool verbose = v && *v && strcmp(v, "0") != 0;
  size_t count = 0;
  int failures = 0;
  int64_t t0 = fz_now_ms();
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
      failures++;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      failures += run_file(argv[i], verbose) != 0;
      count++;
      continue;
    }
    struct dirent **list = NULL;
    int n = scandir(argv[i], &list, skip_dots, alphasort);
    if (n < 0) {
      fprintf(stderr, "replay: cannot list %s: %s\n", argv[i], strerror(errno));
      failures++;
      continue;
    }
    for (int k = 0; k < n; k++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], list[k]->d_name);
      if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        failures += run_file(path, verbose) != 0;
        count++;
      }
      free(list[k]);
    }
    free(list);
  }
  fuzz_teardown();
  printf("replayed %zu inputs in %lld ms\n", count, (long long)(fz_now_ms() - t0));
  return failures ? 1 : 0;
}
