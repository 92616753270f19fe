"""The configuration: parsing (YAML, ``mm2.properties``), validated settings, scopes, export."""
