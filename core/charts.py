"""What every chart does when it has nothing to draw: say so instead of drawing empty axes."""

import plotly.graph_objects as go

NO_DATA = "No data yet for this period"


def _has_data(trace) -> bool:
    for key in ("y", "values", "z", "x"):
        values = getattr(trace, key, None)
        if values is not None and len(values) and any(v not in (None, 0, "") for v in values):
            return True
    return False


def say_when_empty(fig: go.Figure, message: str = NO_DATA) -> go.Figure:
    """A figure none of whose traces holds a non-zero value gets a centred note and no axes.
    Pure and idempotent; the figure's data is left as it is (tests read it)."""
    if any(_has_data(trace) for trace in fig.data):
        return fig
    fig.update_layout(
        annotations=[
            {
                "text": message,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
                "font": {"size": 15, "color": "#7b8794"},
                "name": "no-data",
            }
        ],
        xaxis={"visible": False},
        yaxis={"visible": False},
    )
    return fig
