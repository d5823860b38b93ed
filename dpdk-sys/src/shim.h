/* Out-of-line wrappers for DPDK's static inline functions and macros, which bindgen
 * cannot bind. One call per burst, not per packet, on the fast path. */
#ifndef DATAPLANE_DPDK_SHIM_H
#define DATAPLANE_DPDK_SHIM_H
#include <stdint.h>
#include <rte_mbuf.h>

uint16_t shim_rte_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t shim_rte_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
int shim_rte_pktmbuf_alloc_bulk(struct rte_mempool *pool, struct rte_mbuf **mbufs, unsigned int n);
void shim_rte_pktmbuf_free(struct rte_mbuf *m);
void shim_rte_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int n);
/* Data pointer of the first segment, its length, and setting packet and data length. */
void *shim_rte_pktmbuf_data(struct rte_mbuf *m);
uint16_t shim_rte_pktmbuf_data_len(const struct rte_mbuf *m);
void shim_rte_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len);
/* Flow marks of n received mbufs (0 where the device set none). */
void shim_rte_mbuf_marks(struct rte_mbuf *const *mbufs, uint32_t *marks, unsigned int n);
/* Where the data of a received mbuf lies. */
struct shim_mbuf_info {
	void *buf_addr;
	uint16_t data_off;
	uint16_t data_len;
	uint16_t nb_segs;
};
/* Fills infos[i] for n mbufs (one call per burst). */
void shim_rte_mbuf_infos(struct rte_mbuf *const *mbufs, struct shim_mbuf_info *infos, unsigned int n);
/* 1 when port_id's link is up, 0 when down, -1 when the driver cannot say (the struct's
 * layout differs between DPDK releases, so it is read here). */
int shim_eth_link_up(uint16_t port_id);
/* A received chain whose packet fits `room` bytes from its head's data start: copies the
 * later segments after the head's data, frees them, and leaves m one segment. Returns the
 * packet length, or 0 (m untouched) when m is one segment or the packet does not fit. */
uint32_t shim_coalesce_chain(struct rte_mbuf *m, uint32_t room);
/* Start of an mbuf's buffer and the offset of its data in it. */
void *shim_rte_mbuf_buf_addr(const struct rte_mbuf *m);
uint16_t shim_rte_mbuf_data_off(const struct rte_mbuf *m);
/* The next segment of a packet, or NULL. */
struct rte_mbuf *shim_rte_pktmbuf_next(struct rte_mbuf *m);
/* Number of segments of a received packet. */
uint16_t shim_rte_pktmbuf_nb_segs(const struct rte_mbuf *m);
/* Values of DPDK macros that bindgen cannot evaluate. */
extern const uint64_t shim_rss_ip_udp;
extern const uint64_t shim_rx_offload_buffer_split;
extern const uint16_t shim_mbuf_headroom;
/* Zero-copy TX. A shinfo table holds one rte_mbuf_ext_shared_info per buffer of a
 * region; `free_cb(buf_addr, opaque)` runs when the last mbuf carrying a buffer is freed. */
struct rte_mbuf_ext_shared_info *shim_shinfo_table_new(unsigned int n,
	void (*free_cb)(void *addr, void *opaque), void *opaque);
void shim_shinfo_table_free(struct rte_mbuf_ext_shared_info *table);
/* Attaches buffer `addr` (IOVA = its virtual address, buf_len bytes) to the direct mbuf
 * `m` as an external buffer with table[index] as its shared info, holding `len` bytes. */
void shim_tx_attach(struct rte_mbuf *m, void *addr, uint16_t buf_len, uint16_t len,
	struct rte_mbuf_ext_shared_info *table, uint32_t index);
/* shim_tx_attach for each of n mbufs (one call a burst): buffer indices[i] at addrs[i]
 * holding lens[i] bytes, every buffer buf_len long and its shared info in table. */
void shim_tx_attach_bulk(struct rte_mbuf *const *mbufs, void *const *addrs,
	const uint16_t *lens, const uint32_t *indices, unsigned int n, uint16_t buf_len,
	struct rte_mbuf_ext_shared_info *table);
/* Frees mbufs a driver did not take without running the free callback of buffers
 * attached to them: the caller keeps those buffers. */
void shim_tx_free_untaken(struct rte_mbuf **mbufs, unsigned int n);
/* For each mbuf: the free-callback argument and the shared info of the external buffer it
 * carries when that buffer was attached with `free_cb`, the mbuf is one segment and its
 * data starts at the buffer, else NULL and NULL. */
void shim_attached_opaques(struct rte_mbuf *const *mbufs, void **opaques, void **shinfos,
	unsigned int n, void (*free_cb)(void *addr, void *opaque));
/* When every one of n mbufs passes shim_attached_opaques's test and all carry the same
 * free-callback argument: that argument, with each mbuf's shared info and data length
 * (one pass over the mbufs); else NULL, shinfos and lens then partly written. */
void *shim_attached_run(struct rte_mbuf *const *mbufs, unsigned int n,
	void (*free_cb)(void *addr, void *opaque), void **shinfos, uint16_t *lens);
/* Makes an mbuf that carries its own buffer (received into it) a one-segment frame of
 * `len` bytes at the default headroom, for sending. */
void shim_tx_reuse(struct rte_mbuf *m, uint16_t len);
/* shim_tx_reuse for each of n mbufs with lens[i] (one call a burst). */
void shim_tx_reuse_bulk(struct rte_mbuf *const *mbufs, const uint16_t *lens, unsigned int n);
/* As shim_tx_reuse_bulk for mbufs whose second cache line is already as a reset leaves it
 * (no next segment; the TX offload lengths matter only with flags, which this clears):
 * mbufs of a pool lent for sending, as their pool keeps them or as sent by us. Writes the
 * first cache line only. */
void shim_tx_reuse_lent_bulk(struct rte_mbuf *const *mbufs, const uint16_t *lens, unsigned int n);
/* A pool's objects as they are, without resetting them: all n or none; 0 on success.
 * Through `cache` (a cache the caller owns, for a thread without an lcore) or, when it
 * is NULL, the calling lcore's cache (none for a thread without an lcore). */
int shim_mempool_get_bulk(struct rte_mempool *mp, void **objs, unsigned int n,
	struct rte_mempool_cache *cache);
/* Objects back to their pool as they are, through `cache` as for shim_mempool_get_bulk. */
void shim_mempool_put_bulk(struct rte_mempool *mp, void *const *objs, unsigned int n,
	struct rte_mempool_cache *cache);
/* A cache of `size` objects a thread without an lcore owns (rte_mempool_cache_create);
 * NULL when out of memory. */
struct rte_mempool_cache *shim_mempool_cache_create(unsigned int size);
/* Moves what `cache` holds into the pool and frees the cache. */
void shim_mempool_cache_free(struct rte_mempool_cache *cache, struct rte_mempool *mp);
/* Moves what `cache` holds into the pool. */
void shim_mempool_cache_flush(struct rte_mempool_cache *cache, struct rte_mempool *mp);
/* Moves what every lcore's cache of the pool holds back into the pool itself, so one
 * thread can take it all (no thread may use the pool meanwhile). */
void shim_mempool_flush_caches(struct rte_mempool *mp);
/* When every one of n mbufs is a one-segment frame of the same pool, held once, whose
 * data starts `headroom` bytes into its buffer: that pool, with each frame's length in
 * lens (one pass over the mbufs); else NULL, lens then partly written. */
void *shim_pool_run(struct rte_mbuf *const *mbufs, unsigned int n, uint16_t headroom,
	uint16_t *lens);
/* Device timestamps. RX: DPDK's timestamp dynamic field and flag (registered once per
 * process; 0 on success, else -rte_errno). */
int shim_rx_timestamp_register(int *offset, uint64_t *flag);
/* ts[i] = the NIC clock value stamped on mbuf i, or 0 where the device set none. */
void shim_rx_timestamps(struct rte_mbuf *const *mbufs, uint64_t *ts, unsigned int n,
	int offset, uint64_t flag);
/* TX: the send-on-timestamp field and flag (0 on success, else -rte_errno). */
int shim_tx_timestamp_register(int *offset, uint64_t *flag);
/* Asks the device to send mbuf m no earlier than NIC clock value ts. */
void shim_set_tx_timestamp(struct rte_mbuf *m, int offset, uint64_t flag, uint64_t ts);
extern const uint64_t shim_rx_offload_timestamp;
/* RTE_ETH_RX_OFFLOAD_SCATTER: frames may span a chain of mbufs. */
extern const uint64_t shim_rx_offload_scatter;
extern const uint64_t shim_tx_offload_send_on_timestamp;
/* RTE_ETH_TX_OFFLOAD_VLAN_INSERT. */
extern const uint64_t shim_tx_offload_vlan_insert;
/* Asks the device to insert an 802.1Q tag with `tci` into `m` as it sends it. */
void shim_set_tx_vlan(struct rte_mbuf *m, uint16_t tci);
int shim_rte_errno(void);
unsigned int shim_rte_lcore_id(void);
#endif
