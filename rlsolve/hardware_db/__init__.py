"""The hardware catalog: GPUs and networks with sourced specs, prices and efficiencies.

Built-in data lives in gpus.yaml and networks.yaml next to this file. A directory named by
$RLSOLVE_CATALOG_DIR may add YAML files of the same shape; an entry there replaces the built-in
entry of the same name (so a site can correct a price or efficiency without forking).
"""
from rlsolve.hardware_db.catalog import (OVERLAY_ENV, find_gpu, find_network, inline_network, list_gpus,
                                         list_networks, load_catalog)
from rlsolve.hardware_db.schema import GPU, Catalog, Efficiency, Network, Sourced

__all__ = [
    "GPU", "Network", "Efficiency", "Sourced", "Catalog", "OVERLAY_ENV",
    "load_catalog", "find_gpu", "find_network", "inline_network", "list_gpus", "list_networks",
]
