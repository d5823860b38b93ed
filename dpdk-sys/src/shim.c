#include "shim.h"
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

int shim_rte_errno(void)
{
	return rte_errno;
}

unsigned int shim_rte_lcore_id(void)
{
	return rte_lcore_id();
}
