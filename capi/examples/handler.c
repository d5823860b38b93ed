/* Run to completion from C: a handler on the worker's core generates frames on TX queue 0
 * and checks that they come back on RX queue 0 in order, byte for byte; the main thread
 * only waits and reads the counters. Built and run by `make test` (as loopback.c). */
#include "dataplane.h"
#include "loopback_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *CONFIG = LOOPBACK_CONFIG(4096, 1024, 32, ", delivery: handler");

#define FRAMES 20000u
#define FRAME_LEN 64

/* One worker's state: made by `make`, used on the worker thread only. */
struct worker {
  unsigned core;
  unsigned sent, received, bad;
  volatile int done; /* read by the main thread */
  volatile int released;
};

static struct worker *the_worker;

static void *make(void *user, uint32_t core) {
  (void)user;
  struct worker *w = calloc(1, sizeof *w);
  w->core = core;
  the_worker = w;
  return w;
}

static void on_burst(void *context, DpBurst *burst, DpHandlerTx *tx) {
  (void)tx;
  struct worker *w = context;
  for (size_t i = 0; i < dp_burst_len(burst); i++) {
    const unsigned char *data;
    size_t len;
    unsigned seq;
    if (dp_burst_packet(burst, i, &data, &len, NULL) != DP_STATUS_OK || len != FRAME_LEN) { w->bad++; continue; }
    memcpy(&seq, data, sizeof seq);
    if (seq != w->received || data[FRAME_LEN - 1] != (unsigned char)seq) w->bad++;
    w->received = seq + 1;
  }
  if (dp_burst_port(burst) != 0 || dp_burst_queue(burst) != 0) w->bad++;
  dp_burst_free(burst);
  if (w->received >= FRAMES) w->done = 1;
}

static int on_pass(void *context, DpHandlerTx *tx) {
  struct worker *w = context;
  if (w->sent >= FRAMES) return 0;
  DpBurst *burst = NULL;
  if (dp_handler_tx_alloc(tx, 0, 0, 32, &burst) != DP_STATUS_OK) return 0; /* buffers come back as bursts are freed */
  for (unsigned i = 0; i < 32; i++) {
    unsigned char *data;
    size_t cap;
    unsigned seq = w->sent + i;
    dp_burst_buffer(burst, i, &data, &cap);
    memset(data, (unsigned char)seq, FRAME_LEN);
    memcpy(data, &seq, sizeof seq);
    dp_burst_set_len(burst, i, FRAME_LEN);
  }
  if (dp_handler_tx_send(tx, 0, 0, burst, 0) != DP_STATUS_OK) { dp_burst_free(burst); return 0; }
  w->sent += 32;
  return 1;
}

static void release(void *context) { ((struct worker *)context)->released = 1; }

int main(void) {
  DpHandler handler = {make, on_burst, on_pass, release, NULL};
  DpPlane *plane = NULL;
  DpStatus s = dp_start_yaml(CONFIG, "handler.yaml", &plane);
  if (s != DP_STATUS_ERROR || strstr(dp_last_error(), "start_with_handlers") == NULL) {
    fprintf(stderr, "handler queues without a handler should not start: %s\n", dp_last_error());
    return 1;
  }
  if ((s = dp_start_yaml_with_handler(CONFIG, "handler.yaml", &handler, &plane)) != DP_STATUS_OK) {
    fprintf(stderr, "dp_start_yaml_with_handler failed (%d): %s\n", (int)s, dp_last_error());
    return 1;
  }
  if (dp_rx_queue(plane, "loop0", 0) != NULL) { fprintf(stderr, "a handler queue has no handle\n"); return 1; }
  struct timespec nap = {0, 1000000};
  for (int i = 0; i < 60000 && !(the_worker && the_worker->done); i++) nanosleep(&nap, NULL);
  DpStats stats = {.size = sizeof(DpStats)};
  dp_stats(plane, &stats);
  if ((s = dp_shutdown(plane)) != DP_STATUS_OK) { fprintf(stderr, "dp_shutdown: %s\n", dp_last_error()); return 1; }
  struct worker *w = the_worker;
  if (!w || w->core != 0 || !w->released || w->received != FRAMES || w->bad != 0 || stats.rx_packets != FRAMES) {
    fprintf(stderr, "handler: core %u, received %u of %u, %u bad, released %d, counters rx %llu\n", w ? w->core : 99,
            w ? w->received : 0, FRAMES, w ? w->bad : 0, w ? w->released : 0, (unsigned long long)stats.rx_packets);
    return 1;
  }
  printf("C handler: %u frames generated and checked on the worker of core %u; context released at shutdown\n",
         w->received, w->core);
  free(w);
  return 0;
}
