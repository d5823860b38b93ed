/* The C API end to end on the software loopback: start a plane from YAML, send frames,
 * receive them and check every byte, read the counters, see a configuration error's
 * message, shut down and see the queues report DP_STATUS_STOPPED instead of waiting.
 * Built and run by `make test`, against the installed library:
 *   make install PREFIX=/tmp/dp
 *   cc capi/examples/loopback.c $(PKG_CONFIG_PATH=/tmp/dp/lib/pkgconfig pkg-config --cflags --libs dataplane) \
 *      -Wl,-rpath,/tmp/dp/lib -o loopback && ./loopback                                  */
#include "dataplane.h"
#include "loopback_config.h"

#include <stdio.h>
#include <string.h>

static const char *CONFIG = LOOPBACK_CONFIG(4096, 1024, 32, "");

#define FRAMES 5000
#define FRAME_LEN 200

static int fail(const char *what, DpStatus s) {
  fprintf(stderr, "%s failed (%d): %s\n", what, (int)s, dp_last_error());
  return 1;
}

static unsigned char byte_of(unsigned frame, unsigned i) { return (unsigned char)(frame * 31 + i); }

int main(void) {
  DpPlane *bad = NULL;
  DpStatus s = dp_start_yaml("dataplane:\n  cfg:\n    version: one\n", "bad.yaml", &bad);
  if (s != DP_STATUS_ERROR || strstr(dp_last_error(), "bad.yaml") == NULL) {
    fprintf(stderr, "a bad configuration should fail naming its file: %s\n", dp_last_error());
    return 1;
  }
  printf("configuration error, as expected: %.80s...\n", dp_last_error());

  DpPlane *plane = NULL;
  if ((s = dp_start_yaml(CONFIG, "loopback.yaml", &plane)) != DP_STATUS_OK) return fail("dp_start_yaml", s);
  DpRxQueue *rx = dp_rx_queue(plane, "loop0", 0);
  DpTxQueue *tx = dp_tx_queue(plane, "loop0", 0);
  if (!rx || !tx) return fail("taking the queues", DP_STATUS_ERROR);
  if (dp_rx_queue(plane, "loop0", 7) != NULL) return fail("a missing queue should be NULL", DP_STATUS_ERROR);

  unsigned sent = 0, received = 0;
  while (received < FRAMES) {
    if (sent < FRAMES) {
      DpBurst *burst = NULL;
      unsigned n = FRAMES - sent < 32 ? FRAMES - sent : 32;
      s = dp_tx_alloc(tx, n, &burst);
      if (s == DP_STATUS_OK) {
        for (unsigned i = 0; i < n; i++) {
          unsigned char *data;
          size_t cap;
          if ((s = dp_burst_buffer(burst, i, &data, &cap)) != DP_STATUS_OK) return fail("dp_burst_buffer", s);
          for (unsigned k = 0; k < FRAME_LEN; k++) data[k] = byte_of(sent + i, k);
          if ((s = dp_burst_set_len(burst, i, FRAME_LEN)) != DP_STATUS_OK) return fail("dp_burst_set_len", s);
        }
        if ((s = dp_tx_send(tx, burst, 1000000)) != DP_STATUS_OK) return fail("dp_tx_send", s);
        sent += n;
      } else if (s != DP_STATUS_NO_BUFFERS) {
        return fail("dp_tx_alloc", s);
      }
    }
    DpBurst *got = NULL;
    s = dp_rx_recv(rx, 1000, &got);
    if (s == DP_STATUS_TIMEOUT) continue;
    if (s != DP_STATUS_OK) return fail("dp_rx_recv", s);
    for (size_t i = 0; i < dp_burst_len(got); i++) {
      const unsigned char *data;
      size_t len;
      if ((s = dp_burst_packet(got, i, &data, &len, NULL)) != DP_STATUS_OK) return fail("dp_burst_packet", s);
      if (len != FRAME_LEN) { fprintf(stderr, "frame %u: %zu bytes\n", received, len); return 1; }
      for (unsigned k = 0; k < FRAME_LEN; k++)
        if (data[k] != byte_of(received, k)) { fprintf(stderr, "frame %u byte %u differs\n", received, k); return 1; }
      received++;
    }
    dp_burst_free(got);
  }

  DpStats stats = {.size = sizeof(DpStats)};
  if ((s = dp_stats(plane, &stats)) != DP_STATUS_OK) return fail("dp_stats", s);
  if (stats.tx_packets != FRAMES || stats.rx_packets != FRAMES || stats.dropped != 0) {
    fprintf(stderr, "counters: tx %llu rx %llu dropped %llu\n", (unsigned long long)stats.tx_packets,
            (unsigned long long)stats.rx_packets, (unsigned long long)stats.dropped);
    return 1;
  }
  if ((s = dp_shutdown(plane)) != DP_STATUS_OK) return fail("dp_shutdown", s);
  DpBurst *none = NULL;
  if ((s = dp_rx_recv(rx, 60000000, &none)) != DP_STATUS_STOPPED) return fail("recv after shutdown", s);
  if ((s = dp_tx_alloc(tx, 1, &none)) != DP_STATUS_OK) return fail("alloc after shutdown", s);
  if ((s = dp_tx_send(tx, none, 60000000)) != DP_STATUS_STOPPED) return fail("send after shutdown", s);
  dp_burst_free(none); /* a failed send leaves the burst with the caller */
  dp_rx_queue_free(rx);
  dp_tx_queue_free(tx);
  printf("C API: %u frames sent, received and checked byte by byte; STOPPED after shutdown\n", received);
  return 0;
}
