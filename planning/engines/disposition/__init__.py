"""Disposition of outgoing nodes, a pure engine: types, the sourced defaults, the market bounds
(``market``), the valuation of the four options per node, and the split (``split.recommend_split``,
solved exactly as a min-cost flow in ``optimise``)."""
