"""The index's visitors, one per fact, in the order the walk calls them on each node
(:data:`patchkit.index.extract.VISITORS`)."""
