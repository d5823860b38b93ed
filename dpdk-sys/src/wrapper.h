/* Headers the bindings are generated from. */
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_memory.h>
#include <rte_malloc.h>
#include <rte_dev.h>
#include <rte_flow.h>
#include "shim.h"
