"""Member agent: topology-aware gang placement, binding and fault recovery inside one cluster."""
