#include <stdlib.h>
#include <string.h>
#include "shim.h"
#include <rte_mbuf_dyn.h>
#include <rte_ethdev.h>
#include <rte_errno.h>
#include <rte_lcore.h>

uint16_t shim_rte_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t shim_rte_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, queue, pkts, n);
}

int shim_rte_pktmbuf_alloc_bulk(struct rte_mempool *pool, struct rte_mbuf **mbufs, unsigned int n)
{
	return rte_pktmbuf_alloc_bulk(pool, mbufs, n);
}

void shim_rte_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

void shim_rte_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int n)
{
	rte_pktmbuf_free_bulk(mbufs, n);
}

void *shim_rte_pktmbuf_data(struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, void *);
}

uint16_t shim_rte_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_data_len(m);
}

void shim_rte_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len)
{
	m->data_len = len;
	m->pkt_len = len;
}

void shim_rte_mbuf_marks(struct rte_mbuf *const *mbufs, uint32_t *marks, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		marks[i] = (mbufs[i]->ol_flags & RTE_MBUF_F_RX_FDIR_ID) ? mbufs[i]->hash.fdir.hi : 0;
}

void shim_rte_mbuf_infos(struct rte_mbuf *const *mbufs, struct shim_mbuf_info *infos, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		infos[i].buf_addr = mbufs[i]->buf_addr;
		infos[i].data_off = mbufs[i]->data_off;
		infos[i].data_len = mbufs[i]->data_len;
		infos[i].nb_segs = mbufs[i]->nb_segs;
	}
}

int shim_eth_link_up(uint16_t port_id)
{
	struct rte_eth_link link;
	memset(&link, 0, sizeof(link));
	if (rte_eth_link_get_nowait(port_id, &link) != 0)
		return -1;
	return link.link_status == RTE_ETH_LINK_UP;
}

uint32_t shim_coalesce_chain(struct rte_mbuf *m, uint32_t room)
{
	if (m->nb_segs < 2 || m->pkt_len > room || m->pkt_len > UINT16_MAX)
		return 0;
	char *dst = rte_pktmbuf_mtod_offset(m, char *, m->data_len);
	struct rte_mbuf *seg = m->next;
	while (seg != NULL) {
		struct rte_mbuf *next = seg->next;
		memcpy(dst, rte_pktmbuf_mtod(seg, char *), seg->data_len);
		dst += seg->data_len;
		rte_pktmbuf_free_seg(seg);
		seg = next;
	}
	m->next = NULL;
	m->nb_segs = 1;
	m->data_len = (uint16_t)m->pkt_len;
	return m->pkt_len;
}

void *shim_rte_mbuf_buf_addr(const struct rte_mbuf *m)
{
	return m->buf_addr;
}

uint16_t shim_rte_mbuf_data_off(const struct rte_mbuf *m)
{
	return m->data_off;
}

struct rte_mbuf *shim_rte_pktmbuf_next(struct rte_mbuf *m)
{
	return m->next;
}

uint16_t shim_rte_pktmbuf_nb_segs(const struct rte_mbuf *m)
{
	return m->nb_segs;
}

const uint64_t shim_rss_ip_udp = RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP;
const uint64_t shim_rx_offload_buffer_split = RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT;
const uint16_t shim_mbuf_headroom = RTE_PKTMBUF_HEADROOM;
const uint64_t shim_rx_offload_timestamp = RTE_ETH_RX_OFFLOAD_TIMESTAMP;
const uint64_t shim_rx_offload_scatter = RTE_ETH_RX_OFFLOAD_SCATTER;
const uint64_t shim_tx_offload_send_on_timestamp = RTE_ETH_TX_OFFLOAD_SEND_ON_TIMESTAMP;
const uint64_t shim_tx_offload_vlan_insert = RTE_ETH_TX_OFFLOAD_VLAN_INSERT;

void shim_set_tx_vlan(struct rte_mbuf *m, uint16_t tci)
{
	m->vlan_tci = tci;
	m->ol_flags |= RTE_MBUF_F_TX_VLAN;
}

int shim_rx_timestamp_register(int *offset, uint64_t *flag)
{
	return rte_mbuf_dyn_rx_timestamp_register(offset, flag) < 0 ? -rte_errno : 0;
}

void shim_rx_timestamps(struct rte_mbuf *const *mbufs, uint64_t *ts, unsigned int n,
	int offset, uint64_t flag)
{
	for (unsigned int i = 0; i < n; i++)
		ts[i] = (mbufs[i]->ol_flags & flag) ?
			*RTE_MBUF_DYNFIELD(mbufs[i], offset, rte_mbuf_timestamp_t *) : 0;
}

int shim_tx_timestamp_register(int *offset, uint64_t *flag)
{
	return rte_mbuf_dyn_tx_timestamp_register(offset, flag) < 0 ? -rte_errno : 0;
}

void shim_set_tx_timestamp(struct rte_mbuf *m, int offset, uint64_t flag, uint64_t ts)
{
	*RTE_MBUF_DYNFIELD(m, offset, rte_mbuf_timestamp_t *) = ts;
	m->ol_flags |= flag;
}

struct rte_mbuf_ext_shared_info *shim_shinfo_table_new(unsigned int n,
	void (*free_cb)(void *addr, void *opaque), void *opaque)
{
	struct rte_mbuf_ext_shared_info *t = calloc(n ? n : 1, sizeof(*t));
	if (t == NULL)
		return NULL;
	for (unsigned int i = 0; i < n; i++) {
		t[i].free_cb = free_cb;
		t[i].fcb_opaque = opaque;
		rte_mbuf_ext_refcnt_set(&t[i], 1);
	}
	return t;
}

void shim_shinfo_table_free(struct rte_mbuf_ext_shared_info *table)
{
	free(table);
}

void shim_tx_attach(struct rte_mbuf *m, void *addr, uint16_t buf_len, uint16_t len,
	struct rte_mbuf_ext_shared_info *table, uint32_t index)
{
	struct rte_mbuf_ext_shared_info *shinfo = &table[index];
	rte_mbuf_ext_refcnt_set(shinfo, 1);
	rte_pktmbuf_attach_extbuf(m, addr, (rte_iova_t)(uintptr_t)addr, buf_len, shinfo);
	m->data_len = len;
	m->pkt_len = len;
}

void shim_tx_attach_bulk(struct rte_mbuf *const *mbufs, void *const *addrs,
	const uint16_t *lens, const uint32_t *indices, unsigned int n, uint16_t buf_len,
	struct rte_mbuf_ext_shared_info *table)
{
	for (unsigned int i = 0; i < n; i++)
		shim_tx_attach(mbufs[i], addrs[i], buf_len, lens[i], table, indices[i]);
}

/* Makes `m`, the only holder of the external buffer attached to it, a direct mbuf again
 * without touching the buffer's shared info (no atomic, no free callback): what
 * rte_pktmbuf_detach does after its reference count update. */
static void detach_sole_holder(struct rte_mbuf *m)
{
	struct rte_mempool *mp = m->pool;
	uint16_t priv_size = rte_pktmbuf_priv_size(mp);
	uint32_t mbuf_size = (uint32_t)(sizeof(struct rte_mbuf) + priv_size);
	m->priv_size = priv_size;
	m->buf_addr = (char *)m + mbuf_size;
	rte_mbuf_iova_set(m, rte_mempool_virt2iova(m) + mbuf_size);
	m->buf_len = (uint16_t)rte_pktmbuf_data_room_size(mp);
	rte_pktmbuf_reset_headroom(m);
	m->data_len = 0;
	m->ol_flags = 0;
}

void shim_tx_free_untaken(struct rte_mbuf **mbufs, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct rte_mbuf *m = mbufs[i];
		if (!RTE_MBUF_HAS_EXTBUF(m))
			continue;
		if (rte_mbuf_ext_refcnt_read(m->shinfo) == 1 &&
		    !(rte_pktmbuf_priv_flags(m->pool) & RTE_PKTMBUF_POOL_F_PINNED_EXT_BUF))
			detach_sole_holder(m);
		else
			/* Others hold it too: the free below only drops this mbuf's reference. */
			rte_mbuf_ext_refcnt_update(m->shinfo, 1);
	}
	rte_pktmbuf_free_bulk(mbufs, n);
}

void shim_attached_opaques(struct rte_mbuf *const *mbufs, void **opaques, void **shinfos,
	unsigned int n, void (*free_cb)(void *addr, void *opaque))
{
	for (unsigned int i = 0; i < n; i++) {
		const struct rte_mbuf *m = mbufs[i];
		int ours = RTE_MBUF_HAS_EXTBUF(m) && m->nb_segs == 1 && m->data_off == 0 &&
			   m->shinfo->free_cb == free_cb && rte_mbuf_ext_refcnt_read(m->shinfo) == 1;
		opaques[i] = ours ? m->shinfo->fcb_opaque : NULL;
		shinfos[i] = ours ? (void *)m->shinfo : NULL;
	}
}

void *shim_attached_run(struct rte_mbuf *const *mbufs, unsigned int n,
	void (*free_cb)(void *addr, void *opaque), void **shinfos, uint16_t *lens)
{
	void *opaque = NULL;
	for (unsigned int i = 0; i < n; i++) {
		const struct rte_mbuf *m = mbufs[i];
		if (!RTE_MBUF_HAS_EXTBUF(m) || m->nb_segs != 1 || m->data_off != 0 ||
		    m->shinfo->free_cb != free_cb || rte_mbuf_ext_refcnt_read(m->shinfo) != 1)
			return NULL;
		if (i == 0)
			opaque = m->shinfo->fcb_opaque;
		else if (m->shinfo->fcb_opaque != opaque)
			return NULL;
		shinfos[i] = (void *)m->shinfo;
		lens[i] = m->data_len;
	}
	return opaque;
}

void shim_tx_reuse(struct rte_mbuf *m, uint16_t len)
{
	rte_pktmbuf_reset(m);
	m->data_len = len;
	m->pkt_len = len;
}

void shim_tx_reuse_bulk(struct rte_mbuf *const *mbufs, const uint16_t *lens, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		shim_tx_reuse(mbufs[i], lens[i]);
}

int shim_mempool_get_bulk(struct rte_mempool *mp, void **objs, unsigned int n,
	struct rte_mempool_cache *cache)
{
	if (cache == NULL)
		cache = rte_mempool_default_cache(mp, rte_lcore_id());
	return rte_mempool_generic_get(mp, objs, n, cache);
}

void shim_mempool_put_bulk(struct rte_mempool *mp, void *const *objs, unsigned int n,
	struct rte_mempool_cache *cache)
{
	if (cache == NULL)
		cache = rte_mempool_default_cache(mp, rte_lcore_id());
	rte_mempool_generic_put(mp, objs, n, cache);
}

struct rte_mempool_cache *shim_mempool_cache_create(unsigned int size)
{
	return rte_mempool_cache_create(size, SOCKET_ID_ANY);
}

void shim_mempool_cache_flush(struct rte_mempool_cache *cache, struct rte_mempool *mp)
{
	rte_mempool_cache_flush(cache, mp);
}

void shim_mempool_cache_free(struct rte_mempool_cache *cache, struct rte_mempool *mp)
{
	rte_mempool_cache_flush(cache, mp);
	rte_mempool_cache_free(cache);
}

void shim_mempool_flush_caches(struct rte_mempool *mp)
{
	for (unsigned int lcore = 0; lcore < RTE_MAX_LCORE; lcore++) {
		struct rte_mempool_cache *cache = rte_mempool_default_cache(mp, lcore);
		if (cache != NULL)
			rte_mempool_cache_flush(cache, mp);
	}
}

void *shim_pool_run(struct rte_mbuf *const *mbufs, unsigned int n, uint16_t headroom,
	uint16_t *lens)
{
	struct rte_mempool *pool = n > 0 ? mbufs[0]->pool : NULL;
	for (unsigned int i = 0; i < n; i++) {
		const struct rte_mbuf *m = mbufs[i];
		if (m->pool != pool || m->nb_segs != 1 || m->data_off != headroom ||
		    rte_mbuf_refcnt_read(m) != 1)
			return NULL;
		lens[i] = m->data_len;
	}
	return pool;
}

void shim_tx_reuse_lent_bulk(struct rte_mbuf *const *mbufs, const uint16_t *lens, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct rte_mbuf *m = mbufs[i];
		m->data_off = RTE_MIN(RTE_PKTMBUF_HEADROOM, m->buf_len);
		m->nb_segs = 1;
		m->port = RTE_MBUF_PORT_INVALID;
		m->ol_flags &= RTE_MBUF_F_EXTERNAL;
		m->packet_type = 0;
		m->vlan_tci = 0;
		m->vlan_tci_outer = 0;
		m->data_len = lens[i];
		m->pkt_len = lens[i];
	}
}

int shim_rte_errno(void)
{
	return rte_errno;
}

unsigned int shim_rte_lcore_id(void)
{
	return rte_lcore_id();
}
