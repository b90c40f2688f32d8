/* A stand-in for a model's .wasm that imports WASI functions (test_wasm_js.py): its
 * monolib_open writes to stderr (fd_write), reads the environment (environ_*), random
 * bytes (random_get) and a clock (clock_time_get), then fails with a message saying
 * what it got, which monolib.mjs must throw as the Error's message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char msg[256];

const char* monolib_last_error(void) { return msg; }

void* monolib_open(void) {
  unsigned char r[64];
  struct timespec ts = {0, 0};
  const char* home = getenv("HOME");
  fprintf(stderr, "wasi_probe: opening\n");
  if (getentropy(r, sizeof r) != 0) {
    strcpy(msg, "monolib_open: no entropy");
    return 0;
  }
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int nonzero = 0;
  for (int i = 0; i < 64; i++) nonzero += r[i] != 0;
  snprintf(msg, sizeof msg, "monolib_open: probe (HOME %s, random %s, clock %s)",
           home ? home : "unset", nonzero > 32 ? "ok" : "zeros",
           ts.tv_sec > 0 || ts.tv_nsec > 0 ? "ticks" : "zero");
  return 0;
}

int monolib_run_model(void* model) { return model ? 0 : -1; }
