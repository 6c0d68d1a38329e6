"""Disposition of outgoing nodes, a pure engine: types, the sourced defaults, the valuation of
the four options per node and the split (see ``split.recommend_split``)."""
