/* The examples' configuration: one TX and one RX queue on the software loopback, both on
 * core 0, with BUFS buffers of BUF_SIZE bytes, bursts of BATCH packets, and QUEUE_KEYS
 * (text such as ", delivery: handler") added to both queues. String literals only, so an
 * example writes `static const char *CONFIG = LOOPBACK_CONFIG(...);`. */
#ifndef DATAPLANE_EXAMPLES_LOOPBACK_CONFIG_H
#define DATAPLANE_EXAMPLES_LOOPBACK_CONFIG_H

#define LOOPBACK_CONFIG(BUFS, BUF_SIZE, BATCH, QUEUE_KEYS)                                  \
    "dataplane:\n"                                                                          \
    "  cfg:\n"                                                                              \
    "    version: 1\n"                                                                      \
    "    stream_type: raw\n"                                                                \
    "    master_core: 0\n"                                                                  \
    "    loopback: \"sw\"\n"                                                                \
    "    memory_regions:\n"                                                                 \
    "    - {name: bufs, kind: host, affinity: 0, num_bufs: " #BUFS ", buf_size: " #BUF_SIZE \
    "}\n"                                                                                   \
    "    interfaces:\n"                                                                     \
    "    - name: loop0\n"                                                                   \
    "      address: loopback\n"                                                             \
    "      tx: {queues: [{name: tq, id: 0, cpu_core: 0, batch_size: " #BATCH                \
    ", memory_regions: [bufs]" QUEUE_KEYS "}]}\n"                                           \
    "      rx: {queues: [{name: rq, id: 0, cpu_core: 0, batch_size: " #BATCH                \
    ", timeout_us: 100, memory_regions: [bufs]" QUEUE_KEYS "}]}\n"

#endif
