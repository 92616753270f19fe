"""The AWS adapters: the state table, the config table, Lambda event source mappings."""
