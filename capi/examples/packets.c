/* Everything C can read of a received packet, on the software loopback: an RX queue that
 * splits headers (64 bytes) from payloads gives each packet two segments; flow rules on
 * the UDP destination port give flow ids 1 and 2; `hardware_timestamps` stamps each packet
 * as the worker receives it. Also the versioned structs: an older caller's smaller
 * DpPacketInfo gets only the fields it knows. Then a flow rule added at run time (flow id 7)
 * and removed again.
 * Built by `make test` against the installed library (make install, pkg-config):
 *   make install PREFIX=/tmp/dp
 *   cc capi/examples/packets.c $(PKG_CONFIG_PATH=/tmp/dp/lib/pkgconfig pkg-config --cflags --libs dataplane) \
 *      -Wl,-rpath,/tmp/dp/lib -o packets && ./packets                                      */
#include <dataplane.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *CONFIG =
    "dataplane:\n"
    "  cfg:\n"
    "    version: 1\n"
    "    stream_type: raw\n"
    "    master_core: 0\n"
    "    loopback: \"sw\"\n"
    "    memory_regions:\n"
    "    - {name: txb, kind: host, affinity: 0, num_bufs: 512, buf_size: 1024}\n"
    "    - {name: hdr, kind: host, affinity: 0, num_bufs: 512, buf_size: 64}\n"
    "    - {name: pay, kind: host, affinity: 0, num_bufs: 512, buf_size: 1024}\n"
    "    interfaces:\n"
    "    - name: loop0\n"
    "      address: loopback\n"
    "      tx: {queues: [{name: tq, id: 0, cpu_core: 0, batch_size: 16, memory_regions: [txb]}]}\n"
    "      rx:\n"
    "        hardware_timestamps: true\n"
    "        queues:\n"
    "        - {name: rq, id: 0, cpu_core: 0, batch_size: 16, timeout_us: 100, memory_regions: [hdr, pay]}\n"
    "        flows:\n"
    "        - {name: a, id: 1, action: {type: queue, id: 0}, match: {udp_dst: 5000}}\n"
    "        - {name: b, id: 2, action: {type: queue, id: 0}, match: {udp_dst: 6000}}\n";

#define FRAMES 200
#define FRAME_LEN 300 /* 64 bytes of headers, then 236 of payload */

static int fail(const char *what, DpStatus s) {
  fprintf(stderr, "%s failed (%d): %s\n", what, (int)s, dp_last_error());
  return 1;
}

/* An Ethernet + IPv4 + UDP frame to `port`, then a payload whose bytes name the frame. */
static void udp_frame(unsigned n, unsigned port, unsigned char *f) {
  memset(f, 0, FRAME_LEN);
  f[12] = 0x08;                  /* EtherType IPv4 */
  f[14] = 0x45;                  /* version 4, 20-byte header */
  unsigned ip_len = FRAME_LEN - 14, udp_len = FRAME_LEN - 34;
  f[16] = ip_len >> 8, f[17] = ip_len & 0xff;
  f[22] = 64, f[23] = 17;        /* TTL, UDP */
  f[26] = 10, f[29] = 1, f[30] = 10, f[33] = 2;
  f[34] = 0x13, f[35] = 0x88;    /* source port 5000 */
  f[36] = port >> 8, f[37] = port & 0xff;
  f[38] = udp_len >> 8, f[39] = udp_len & 0xff;
  for (unsigned k = 42; k < FRAME_LEN; k++) f[k] = (unsigned char)(n * 7 + k);
}

/* The main run's frames: to port 5000 (even frames, flow 1) or 6000 (odd, flow 2). */
static void frame(unsigned n, unsigned char *f) { udp_frame(n, n % 2 ? 6000 : 5000, f); }

static unsigned long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

/* The first version of DpPacketInfo, as a program built against it knows it. */
typedef struct {
  size_t size;
  uint64_t length;
} DpPacketInfoV0;

/* Timestamps: from the plane's clock (Unix epoch), never going back from packet to
 * packet; within a minute of the start only so that a clock step cannot fail the run. */
static unsigned long long last_stamp;

static int check(const DpBurst *b, size_t i, unsigned n, unsigned long long start) {
  unsigned char want[FRAME_LEN];
  frame(n, want);
  DpPacketInfo info = {.size = sizeof info};
  DpStatus s = dp_burst_packet_info(b, i, &info);
  if (s != DP_STATUS_OK) return fail("dp_burst_packet_info", s);
  unsigned flow = n % 2 ? 2 : 1;
  if (info.size != sizeof info || info.length != FRAME_LEN || info.segments != 2 || info.flow_id != flow ||
      info.timestamp_ns < last_stamp || info.timestamp_ns + 60000000000ull < start ||
      info.timestamp_ns > start + 60000000000ull) {
    fprintf(stderr, "frame %u: size %zu length %llu segments %u flow %u (want %u) timestamp %llu\n", n, info.size,
            (unsigned long long)info.length, info.segments, info.flow_id, flow,
            (unsigned long long)info.timestamp_ns);
    return 1;
  }
  last_stamp = info.timestamp_ns;
  size_t at = 0;
  for (size_t seg = 0; seg < info.segments; seg++) {
    const unsigned char *data;
    size_t len;
    uint64_t device = 1;
    if ((s = dp_burst_segment(b, i, seg, &data, &len, &device)) != DP_STATUS_OK) return fail("dp_burst_segment", s);
    size_t want_len = seg == 0 ? 64 : FRAME_LEN - 64;
    if (len != want_len || device != 0 || memcmp(data, want + at, len) != 0) {
      fprintf(stderr, "frame %u segment %zu: %zu bytes (want %zu), device address %llu, or bytes differ\n", n, seg,
              len, want_len, (unsigned long long)device);
      return 1;
    }
    at += len;
  }
  const unsigned char *data;
  size_t len;
  if (dp_burst_segment(b, i, 2, &data, &len, NULL) != DP_STATUS_INVALID_ARGUMENT ||
      strstr(dp_last_error(), "2 segment") == NULL) {
    fprintf(stderr, "a third segment should be refused: %s\n", dp_last_error());
    return 1;
  }
  DpPacketInfoV0 old = {.size = sizeof old};
  if ((s = dp_burst_packet_info(b, i, (DpPacketInfo *)(void *)&old)) != DP_STATUS_OK ||
      old.size != sizeof old || old.length != FRAME_LEN) {
    fprintf(stderr, "an older DpPacketInfo: status %d, size %zu, length %llu\n", (int)s, old.size,
            (unsigned long long)old.length);
    return 1;
  }
  return 0;
}

int main(void) {
  unsigned long long start = now_ns();
  DpPlane *plane = NULL;
  DpStatus s = dp_start_yaml(CONFIG, "packets.yaml", &plane);
  if (s != DP_STATUS_OK) return fail("dp_start_yaml", s);
  DpRxQueue *rx = dp_rx_queue(plane, "loop0", 0);
  DpTxQueue *tx = dp_tx_queue(plane, "loop0", 0);
  if (!rx || !tx) return fail("taking the queues", DP_STATUS_ERROR);
  DpStats unset = {0};
  if (dp_stats(plane, &unset) != DP_STATUS_INVALID_ARGUMENT || strstr(dp_last_error(), "DpStats.size") == NULL) {
    fprintf(stderr, "DpStats without its size should be refused by name: %s\n", dp_last_error());
    return 1;
  }

  unsigned sent = 0, received = 0;
  for (int rounds = 0; received < FRAMES; rounds++) {
    if (rounds > 2000000) { fprintf(stderr, "sent %u, received %u\n", sent, received); return 1; }
    if (sent < FRAMES) {
      DpBurst *burst = NULL;
      unsigned n = FRAMES - sent < 16 ? FRAMES - sent : 16;
      s = dp_tx_alloc(tx, n, &burst);
      if (s == DP_STATUS_OK) {
        for (unsigned i = 0; i < n; i++) {
          unsigned char *data;
          size_t cap;
          if ((s = dp_burst_buffer(burst, i, &data, &cap)) != DP_STATUS_OK) return fail("dp_burst_buffer", s);
          frame(sent + i, data);
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
    for (size_t i = 0; i < dp_burst_len(got); i++, received++)
      if (check(got, i, received, start)) return 1;
    dp_burst_free(got);
  }
  /* A rule added at run time, in the configuration's schema: its frames carry its id;
   * once it is removed they carry none (the loopback's default queue takes them). */
  uint32_t added = 0;
  if (dp_add_flow(plane, "loop0", "{name: c, id: bad}", &added) != DP_STATUS_INVALID_ARGUMENT ||
      strstr(dp_last_error(), "flow.id") == NULL) {
    fprintf(stderr, "a bad rule should be refused naming its key: %s\n", dp_last_error());
    return 1;
  }
  s = dp_add_flow(plane, "loop0", "{name: c, id: 7, action: {type: queue, id: 0}, match: {udp_dst: 7000}}", &added);
  if (s != DP_STATUS_OK || added != 7) return fail("dp_add_flow", s);
  for (unsigned round = 0; round < 2; round++) {
    unsigned want = round == 0 ? 7 : 0, got_flow = 99;
    DpBurst *burst = NULL;
    while ((s = dp_tx_alloc(tx, 1, &burst)) == DP_STATUS_NO_BUFFERS) {}
    if (s != DP_STATUS_OK) return fail("dp_tx_alloc", s);
    unsigned char *data;
    size_t cap;
    if ((s = dp_burst_buffer(burst, 0, &data, &cap)) != DP_STATUS_OK) return fail("dp_burst_buffer", s);
    udp_frame(round, 7000, data);
    dp_burst_set_len(burst, 0, FRAME_LEN);
    if ((s = dp_tx_send(tx, burst, 1000000)) != DP_STATUS_OK) return fail("dp_tx_send", s);
    DpBurst *got = NULL;
    if ((s = dp_rx_recv(rx, 10000000, &got)) != DP_STATUS_OK) return fail("dp_rx_recv (added flow)", s);
    DpPacketInfo info = {.size = sizeof info};
    if (dp_burst_len(got) == 1 && dp_burst_packet_info(got, 0, &info) == DP_STATUS_OK) got_flow = info.flow_id;
    dp_burst_free(got);
    if (got_flow != want) {
      fprintf(stderr, "port 7000 with the rule %s: flow %u, want %u\n", round ? "removed" : "added", got_flow, want);
      return 1;
    }
    if (round == 0 && (s = dp_remove_flow(plane, "loop0", added)) != DP_STATUS_OK) return fail("dp_remove_flow", s);
  }

  DpStats stats = {.size = sizeof stats};
  if ((s = dp_stats(plane, &stats)) != DP_STATUS_OK || stats.size != sizeof stats || stats.rx_packets != FRAMES + 2) {
    fprintf(stderr, "dp_stats: status %d size %zu rx %llu\n", (int)s, stats.size, (unsigned long long)stats.rx_packets);
    return 1;
  }
  dp_rx_queue_free(rx);
  dp_tx_queue_free(tx);
  if ((s = dp_shutdown(plane)) != DP_STATUS_OK) return fail("dp_shutdown", s);
  printf("C API: %u packets read as two segments each, flow ids 1 and 2, timestamps from the plane's clock, never going back; a rule added and removed at run time\n",
         received);
  return 0;
}
