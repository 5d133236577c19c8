"""distmm.draw(): a picture of a strategy's sharding, as `distmm --draw FILE.svg` draws it."""
import os
import tempfile

from . import _distmm


def draw(strategy, shape, ranks, out="sharding.svg", **options):
    """Writes an SVG of A, B and C (shape = (m, k, n)) with each block coloured by the rank
    that holds it under the strategy's distributed layout, and what every rank sends and
    receives in each collective of one execution (a dry run: no data moves). Returns `out`;
    the file appears whole or not at all."""
    m, k, n = (int(x) for x in shape)
    svg = _distmm.sharding_svg(strategy, m, k, n, int(ranks), options)
    folder = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".distmm-draw-", suffix=".svg")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(svg)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    return out
