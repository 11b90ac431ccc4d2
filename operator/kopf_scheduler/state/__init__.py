"""Cluster state: the columnar node table, NodeInfo/PodInfo, the cache with assume/forget, selectors."""
